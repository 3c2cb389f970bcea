"""Linear probes (scikit-learn logistic regression) and their shuffled-label control.

A probe reads one causal variable from the activations at one site and position. It is a
multinomial `LogisticRegression` on standardised features (standardisation is fitted on the
probe's training examples only).

Control (`shuffled`): the same probe fitted to the variable's labels permuted across every
(sequence, position) cell where the variable is defined, jointly. Each activation is then
paired with a label drawn from the variable's overall distribution, independently of that
activation, at every position and for the pooled probe alike, so the control's test
accuracy is the chance rate of that distribution (about the share of its most frequent
value): the accuracy a probe reaches with no information about the variable in the
representation [ours: Hewitt & Liang (2019) motivate a control; this is the permutation
form, not their control *task*]. The gap probe - control is what the representation
explains beyond the label marginal. A permutation within each position would not control:
the pooled probe could still read the position from the activations and predict each
position's own label distribution (a position baseline, not chance).

Convergence: a probe whose lbfgs run stopped at `max_iter` has not converged; its accuracies
are those of the unfinished fit. Each probe says so (`probe` -> `converged`, a column of the
probes table) and the analysis prints one line counting them (`not_converged_line`) instead of
scikit-learn's warning per fit.

Train and test probe examples are disjoint *sequences*: every position of one sequence goes
to the same side, so the pooled probe (all positions at once) cannot memorise a sequence.
"""
from __future__ import annotations

import warnings

import numpy as np

POOLED = -1  # `position` of a probe fitted on every position at once


def fit_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
              C: float = 1.0, max_iter: int = 200) -> tuple[float, float]:
    """(train accuracy, test accuracy) of a logistic-regression probe (`probe`, without
    whether it converged)."""
    return probe(x_train, y_train, x_test, y_test, C, max_iter)[:2]


def probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
          C: float = 1.0, max_iter: int = 200) -> tuple[float, float, bool]:
    """(train accuracy, test accuracy, converged) of a logistic-regression probe. x: (n, d);
    y: (n,). `converged` is False when lbfgs stopped at `max_iter` (scikit-learn's
    `ConvergenceWarning`, caught here and reported by the caller once, not per probe): the
    accuracies are then those of the unfinished fit.

    A training set with one class gets the constant predictor (what any probe would learn)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    classes = np.unique(y_train)
    if len(classes) < 2:
        return float(np.mean(y_train == classes[0])), float(np.mean(y_test == classes[0])), True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        # a test set may lack some of the training classes: scoring still holds
        warnings.filterwarnings("ignore", message="The number of unique classes")
        scaler = StandardScaler().fit(x_train)
        clf = LogisticRegression(C=C, max_iter=max_iter)
        clf.fit(scaler.transform(x_train), y_train)
        accuracy = (float(clf.score(scaler.transform(x_train), y_train)),
                    float(clf.score(scaler.transform(x_test), y_test)))
    converged = True
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            converged = False
        else:  # any other warning goes on to the user as it came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return (*accuracy, converged)


def not_converged_line(n_failed: int, n_fits: int, max_iter: int) -> str:
    """The one line an analysis prints when some of its probes stopped at `max_iter`."""
    return (f"warning: {n_failed} of {n_fits} probes did not converge within "
            f"max_iter={max_iter}; raise probes.max_iter")


def shuffled(values: np.ndarray, seed) -> np.ndarray:
    """(n, pos) labels with the defined values (>= 0) permuted across every defined
    (sequence, position) cell at once; undefined cells (-1) stay where they are."""
    out = values.copy()
    ok = values >= 0  # (n, pos)
    out[ok] = np.random.default_rng(seed).permutation(values[ok])
    return out


def probe_site(acts: np.ndarray, variables: dict[str, np.ndarray], train: np.ndarray,
               test: np.ndarray, positions, *, pooled: bool, controls: dict[str, np.ndarray],
               min_train: int, min_test: int, max_pooled: int, C: float, max_iter: int,
               seed: int = 0, n_jobs: int = 1) -> list[tuple]:
    """Probe every variable at every position of one site (and pooled over positions).

    acts (n, pos, d); variables / controls: name -> (n, pos) labels (-1 undefined);
    train / test: sequence indices. Returns rows (variable, position, control, split,
    accuracy, converged); `n_jobs` > 1 fits probes in parallel processes."""
    jobs, keys = [], []
    for name, values in variables.items():
        for control, labels in ((False, values), (True, controls[name])):
            for p in positions:
                if p < min(acts.shape[1], labels.shape[1]):
                    jobs.append((_fit_at, (acts[:, p], labels[:, p], train, test, min_train,
                                           min_test, C, max_iter)))
                    keys.append((name, p, control))
            if pooled:
                jobs.append((_fit_pooled, (acts, labels, train, test, min_train, min_test,
                                           max_pooled, C, max_iter, seed)))
                keys.append((name, POOLED, control))
    from threadpoolctl import threadpool_limits

    # One BLAS thread per probe: the fits are small, and a multithreaded BLAS on them is
    # slower by an order of magnitude (measured: 10 ms vs 200 ms a probe on a busy 2-core
    # machine); parallelism comes from fitting several probes at once (`n_jobs`).
    with threadpool_limits(limits=1):
        if n_jobs == 1:
            results = [fn(*args) for fn, args in jobs]
        else:
            from joblib import Parallel, delayed
            results = Parallel(n_jobs=n_jobs)(delayed(fn)(*args) for fn, args in jobs)
    rows = []
    for (name, p, control), got in zip(keys, results):
        if got is not None:
            rows.append((name, p, control, "train", got[0], got[2]))
            rows.append((name, p, control, "test", got[1], got[2]))
    return rows


def _fit_at(x, y, train, test, min_train, min_test, C, max_iter):
    tr, te = train[y[train] >= 0], test[y[test] >= 0]
    if len(tr) < min_train or len(te) < min_test:
        return None
    return probe(x[tr], y[tr], x[te], y[te], C, max_iter)


def _fit_pooled(acts, labels, train, test, min_train, min_test, max_pooled, C, max_iter, seed):
    n_pos = min(acts.shape[1], labels.shape[1])
    acts, labels = acts[:, :n_pos], labels[:, :n_pos]
    rng = np.random.default_rng(seed)

    def rows(idx, cap):
        seq, pos = np.nonzero(labels[idx] >= 0)
        seq = idx[seq]
        if len(seq) > cap:
            keep = rng.choice(len(seq), size=cap, replace=False)
            seq, pos = seq[keep], pos[keep]
        return acts[seq, pos], labels[seq, pos]

    x_tr, y_tr = rows(train, max_pooled)
    x_te, y_te = rows(test, max_pooled)
    if len(y_tr) < min_train or len(y_te) < min_test:
        return None
    return probe(x_tr, y_tr, x_te, y_te, C, max_iter)
