"""Scores over counterfactual pairs: interchange-intervention accuracy (IIA) on the pairs that
test the intervention, and its interval.

A pair whose counterfactual output equals what the base produces anyway (`Pairs.changed`
False) is right under any intervention that leaves the base alone, so counting it rewards
doing nothing: on counting's `ctx_distr:count` pairs only ~12 % change the output, and an
untrained random rotation scored 0.82 on all pairs. The same holds per network: where the
network's own output on the base is already the counterfactual label (counting's phase can
be read from the response tokens the base is fed: on the trained GRU 25 % of the changed
`up_down:phase` pairs), or is not the base label, a no-op is right or the pair says nothing.
IIA is therefore the share right among *tested* pairs
(`study.analyses.common.interchange.judged`: the network's base output is the base label
and differs from the counterfactual one) [ours]; the causal model's changed count and the
all-pairs share (Grant et al. 2025's IIA) are kept beside it.

The interval is Wilson's score interval for a binomial proportion (each tested pair is right
or not): unlike a bootstrap over pairs it does not collapse to zero width when every pair, or
none, is right, and it needs no resampling.
"""
from __future__ import annotations

import numpy as np

from study.core.intervals import LEVEL  # the intervals' coverage


def wilson_interval(right: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of the share of `right` ((n,) bool or 0/1) at coverage `level`
    (scipy's `binomtest(...).proportion_ci(method="wilson")`); (nan, nan) for no pairs."""
    from scipy.stats import binomtest

    x = np.asarray(right, dtype=bool)
    if x.size == 0:
        return float("nan"), float("nan")
    ci = binomtest(int(x.sum()), int(x.size)).proportion_ci(confidence_level=level,
                                                            method="wilson")
    return float(ci.low), float(ci.high)


def iia_scores(right: np.ndarray, changed: np.ndarray, tested: np.ndarray,
               min_changed: int) -> dict:
    """The IIA columns of one split's pairs: right (n,) bool (every scored output equals the
    counterfactual one), changed (n,) bool (the causal model's), tested (n,) bool (the pairs
    that test the intervention on this network). `iia`, `iia_lo`, `iia_hi` are over tested
    pairs and NaN when fewer than `min_changed` of them (`too_few`); `iia_all` over all pairs;
    `n_changed`, `n_tested` the two counts."""
    right, changed = np.asarray(right, bool), np.asarray(changed, bool)
    tested = np.asarray(tested, bool)
    n, n_tested = int(right.size), int(tested.sum())
    too_few = n_tested < max(min_changed, 1)
    on = right[tested]
    iia = float("nan") if too_few else float(on.mean())
    lo, hi = (float("nan"), float("nan")) if too_few else wilson_interval(on)
    return dict(iia=iia, iia_lo=lo, iia_hi=hi,
                iia_all=float(right.mean()) if n else float("nan"),
                n_pairs=n, n_changed=int(changed.sum()), n_tested=n_tested,
                too_few=bool(too_few))


def changed_iia(right: np.ndarray, on: np.ndarray) -> float:
    """Share right among the pairs `on` ((n,) bool: the tested pairs, or the changed ones where
    no network judged them), all pairs if `on` holds none: the restart-selection score, with
    no minimum count."""
    right, on = np.asarray(right, bool), np.asarray(on, bool)
    pick = right[on] if on.any() else right
    return float(pick.mean()) if pick.size else float("nan")


def chance_iia(cf_labels: np.ndarray, on: np.ndarray) -> float:
    """The chance level of a pair set [ours]: the share of the pairs `on` ((n,) bool: the
    tested ones) expected right when each is given the counterfactual answer of another
    such pair at random, sum_v p_v^2 over the counterfactual label rows v of `cf_labels`
    ((n, T)) among those pairs. What an intervention scores that writes some pair's value
    without regard to which (a shuffled control that carries the answer, or a guess from the
    answers' distribution); NaN where no pair is on."""
    cf = np.asarray(cf_labels)[np.asarray(on, bool)]
    if not len(cf):
        return float("nan")
    _, counts = np.unique(cf.reshape(len(cf), -1), axis=0, return_counts=True)
    p = counts / counts.sum()
    return float((p ** 2).sum())
