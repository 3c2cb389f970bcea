"""Intervals over runs for measures between architectures, each run counted once [ours].

A comparison of architectures X and Y over seeds gives a matrix of run pairs (every X run
with every Y run). The pairs share runs, so they are not independent: nine pairs of three
runs each hold three runs' worth of evidence, not nine. The bootstrap here resamples *runs*:
each draw picks len(X) runs of X and len(Y) runs of Y with replacement and averages the
measure over the pairs among the drawn runs (for X = Y, one draw of runs on both sides, a
run never paired with itself); the interval is the draws' percentile interval. With one run
of an architecture its side does not vary, and the interval says only what the other side's
runs allow; where no draw can differ from another (one run on each side; two runs of one
architecture, whose only pair of distinct runs every useful draw repeats) there is no
interval (NaN ends).

`by_architecture(rows, columns)` gives, per ordered pair of architectures, the mean over run
pairs and the interval of each column, and of any difference of two columns asked for
(`differences`): the verdict of a comparison follows the interval of a difference (stitching
minus a control), not two intervals side by side.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

N_BOOT = 2000  # bootstrap draws [ours]
LEVEL = 0.95  # two-sided percentile interval [ours]


def _matrix(rows: pd.DataFrame, column: str, runs_a: list, runs_b: list) -> np.ndarray:
    """(len(runs_a), len(runs_b)) of `column` per (run, other_run); NaN where absent or the
    same run."""
    m = np.full((len(runs_a), len(runs_b)), np.nan)
    ia = {r: i for i, r in enumerate(runs_a)}
    ib = {r: j for j, r in enumerate(runs_b)}
    for run, other, v in rows[["run", "other_run", column]].itertuples(index=False):
        if run != other and run in ia and other in ib:
            m[ia[run], ib[other]] = v
    return m


def run_bootstrap(matrix: np.ndarray, same: bool, n_boot: int = N_BOOT, level: float = LEVEL,
                  seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi) of the mean over the finite cells of `matrix` (runs of X in rows, runs
    of Y in columns), the interval from resampling runs; `same`: X and Y are one list of runs
    (resampled together)."""
    finite = np.isfinite(matrix)
    if not finite.any():
        return (float("nan"),) * 3
    mean = float(matrix[finite].mean())
    na, nb = matrix.shape
    if (same and na < 3) or (not same and na < 2 and nb < 2):
        return mean, float("nan"), float("nan")  # every draw gives the same pairs
    rng = np.random.default_rng(seed)
    ia = rng.integers(na, size=(n_boot, na))  # (n_boot, na) drawn runs of X
    ib = ia if same else rng.integers(nb, size=(n_boot, nb))
    sub = matrix[ia[:, :, None], ib[:, None, :]]  # (n_boot, na, nb)
    if same:  # a run drawn twice is still one run: not paired with itself
        sub = np.where(ia[:, :, None] == ib[:, None, :], np.nan, sub)
    ok = np.isfinite(sub)
    counts = ok.sum((1, 2))
    sums = np.where(ok, sub, 0.0).sum((1, 2))
    stats = sums[counts > 0] / counts[counts > 0]
    if not len(stats):
        return mean, mean, mean
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail])
    return mean, float(lo), float(hi)


def by_architecture(rows: pd.DataFrame, columns: list[str],
                    differences: dict[str, tuple[str, str]] | None = None,
                    n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Per ordered (model, other_model): n_runs, n_other_runs, n_pairs and, for each column
    and each difference name -> (a, b) (the column a - b), its mean, lo and hi over runs.
    `rows`: one per (run, other_run) with columns run, other_run, model, other_model."""
    rows = rows.copy()
    for name, (a, b) in (differences or {}).items():
        rows[name] = rows[a] - rows[b]
    names = list(columns) + list(differences or {})
    out = []
    for (ma, mb), g in rows.groupby(["model", "other_model"], sort=False):
        runs_a = sorted(set(g["run"]))
        runs_b = sorted(set(g["other_run"]))
        same = ma == mb
        if same:
            runs_a = runs_b = sorted(set(runs_a) | set(runs_b))
        row = dict(model=ma, other_model=mb, n_runs=len(runs_a), n_other_runs=len(runs_b),
                   n_pairs=int((g["run"] != g["other_run"]).sum()))
        for name in names:
            mean, lo, hi = run_bootstrap(_matrix(g, name, runs_a, runs_b), same, n_boot,
                                         seed=seed)
            row.update({name: mean, f"{name}_lo": lo, f"{name}_hi": hi})
        out.append(row)
    return pd.DataFrame(out)


def interval_text(r: dict, c: str) -> str:
    """"mean [lo, hi]" of column `c` of a `by_architecture` row; the mean alone without an
    interval; "–" without a value."""
    if pd.isna(r[c]):
        return "–"
    if pd.isna(r[c + "_lo"]):
        return f"{r[c]:.2f}"
    return f"{r[c]:.2f} [{r[c + '_lo']:.2f}, {r[c + '_hi']:.2f}]"
