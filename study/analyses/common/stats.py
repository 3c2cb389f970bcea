"""Scores over counterfactual pairs: interchange-intervention accuracy (IIA) on the pairs whose
intervention must change the output, and its bootstrap interval.

A pair whose counterfactual output equals what the base produces anyway (`Pairs.changed`
False) is right under any intervention that leaves the base alone, so counting it rewards
doing nothing: on counting's `ctx_distr:count` pairs only ~12 % change the output, and an
untrained random rotation scored 0.82 on all pairs. IIA is therefore the share right among
changed pairs [ours]; the all-pairs share (Grant et al. 2025's IIA) is kept beside it.
"""
from __future__ import annotations

import numpy as np

LEVEL = 0.95  # the interval's coverage


def bootstrap_interval(right: np.ndarray, n_boot: int = 1000, seed: int = 0,
                       level: float = LEVEL) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `right` ((n,) bool or 0/1) over pairs
    resampled with replacement; (nan, nan) for no pairs."""
    x = np.asarray(right, dtype=np.float64)
    if x.size == 0 or n_boot < 1:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // x.size)  # bounded memory: chunk * n indices at a time
    for lo in range(0, n_boot, chunk):
        m = min(chunk, n_boot - lo)
        means[lo:lo + m] = x[rng.integers(0, x.size, size=(m, x.size))].mean(1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(lo), float(hi)


def iia_scores(right: np.ndarray, changed: np.ndarray, min_changed: int, n_boot: int = 1000,
               seed: int = 0) -> dict:
    """The IIA columns of one split's pairs: right (n,) bool (every scored output equals the
    counterfactual one), changed (n,) bool. `iia`, `iia_lo`, `iia_hi` are over changed pairs
    and NaN when fewer than `min_changed` of them (`too_few`); `iia_all` over all pairs."""
    right, changed = np.asarray(right, bool), np.asarray(changed, bool)
    n, n_changed = int(right.size), int(changed.sum())
    too_few = n_changed < max(min_changed, 1)
    on = right[changed]
    iia = float("nan") if too_few else float(on.mean())
    lo, hi = (float("nan"), float("nan")) if too_few else bootstrap_interval(on, n_boot, seed)
    return dict(iia=iia, iia_lo=lo, iia_hi=hi,
                iia_all=float(right.mean()) if n else float("nan"),
                n_pairs=n, n_changed=n_changed, too_few=bool(too_few))


def changed_iia(right: np.ndarray, changed: np.ndarray) -> float:
    """Share right among changed pairs (all pairs if none changed): the restart-selection
    score, with no minimum count."""
    right, changed = np.asarray(right, bool), np.asarray(changed, bool)
    pick = right[changed] if changed.any() else right
    return float(pick.mean()) if pick.size else float("nan")
