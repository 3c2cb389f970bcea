"""Scores over counterfactual pairs: interchange-intervention accuracy (IIA) on the pairs whose
intervention must change the output, and its interval.

A pair whose counterfactual output equals what the base produces anyway (`Pairs.changed`
False) is right under any intervention that leaves the base alone, so counting it rewards
doing nothing: on counting's `ctx_distr:count` pairs only ~12 % change the output, and an
untrained random rotation scored 0.82 on all pairs. IIA is therefore the share right among
changed pairs [ours]; the all-pairs share (Grant et al. 2025's IIA) is kept beside it.

The interval is Wilson's score interval for a binomial proportion (each changed pair is right
or not): unlike a bootstrap over pairs it does not collapse to zero width when every pair, or
none, is right, and it needs no resampling.
"""
from __future__ import annotations

import numpy as np

LEVEL = 0.95  # the interval's coverage


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


def iia_scores(right: np.ndarray, changed: np.ndarray, min_changed: int) -> dict:
    """The IIA columns of one split's pairs: right (n,) bool (every scored output equals the
    counterfactual one), changed (n,) bool. `iia`, `iia_lo`, `iia_hi` are over changed pairs
    and NaN when fewer than `min_changed` of them (`too_few`); `iia_all` over all pairs."""
    right, changed = np.asarray(right, bool), np.asarray(changed, bool)
    n, n_changed = int(right.size), int(changed.sum())
    too_few = n_changed < max(min_changed, 1)
    on = right[changed]
    iia = float("nan") if too_few else float(on.mean())
    lo, hi = (float("nan"), float("nan")) if too_few else wilson_interval(on)
    return dict(iia=iia, iia_lo=lo, iia_hi=hi,
                iia_all=float(right.mean()) if n else float("nan"),
                n_pairs=n, n_changed=n_changed, too_few=bool(too_few))


def changed_iia(right: np.ndarray, changed: np.ndarray) -> float:
    """Share right among changed pairs (all pairs if none changed): the restart-selection
    score, with no minimum count."""
    right, changed = np.asarray(right, bool), np.asarray(changed, bool)
    pick = right[changed] if changed.any() else right
    return float(pick.mean()) if pick.size else float("nan")
