"""A hierarchical bootstrap over runs and the pairs within each run [ours].

An interchange result is a share of pairs right in each of a few runs (seeds). Its
uncertainty has two levels: which runs were trained (the seeds vary between runs) and which
pairs were drawn (each run's share is a sample of its pairs). The bootstrap here resamples
both, in that order (the two-stage resampling of hierarchical data in Davison & Hinkley 1997,
"Bootstrap Methods and their Application", ch. 3: runs with replacement, then pairs with
replacement within each run drawn), and the statistic is the mean over runs of each run's
mean, every run weighted alike.

A percentile interval over few runs covers too little: with three runs there are at most ten
distinct resamples of runs, and a resample's spread of run means is (n - 1)/n of the
runs' own spread. So the interval is the bootstrap's percentile interval widened about the
mean, each side by the factor t_{n-1} / z · sqrt(n / (n - 1)) (Student's t quantile on
n - 1 degrees of freedom over the normal's, and the resample's variance made unbiased): it
keeps the bootstrap's asymmetry and has Student's t width over the runs. On planted data
(per-run means drawn around a true mean, each run's pairs Bernoulli around its mean) it
covers the true mean in at least 90 of 100 draws (`tests/core/test_bootstrap.py`; 97-100
of 100 over three and five runs): conservative, as drawing pairs again adds their noise to
run means that already hold it. The plain percentile interval over three runs covers 83-86
of 100 where the runs vary. One run has no interval (NaN ends): it says nothing of how runs
vary.

- `hierarchical_interval(runs)`: mean and interval of one measure, `runs` each run's
  per-pair outcomes;
- `difference_interval(a, b, same_pairs)`: of a - b (stitched − own, stitched − a code),
  paired by run (one draw of runs for both) and, with `same_pairs`, by pair;
- `crossed_interval(cells, same)`: the same for a measure between two runs (stitching A
  into B): cells[i][j] the pairs' outcomes of run i of one architecture with run j of the
  other; runs of each side are drawn (one draw for both sides where the architectures are
  one, `same`, a run never paired with itself), then pairs within each drawn cell; `other`
  gives a second measure on the same cells, for the interval of the difference;
- `outcomes(rate, n)`: a run's per-pair outcomes from a share right and its number of pairs
  (what the stitching table keeps: an IIA and n_tested).

Torch-free and pandas-free: numpy and scipy only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from study.core.intervals import LEVEL  # the intervals' coverage

N_BOOT = 4000  # bootstrap draws [ours]


@dataclass(frozen=True)
class Interval:
    """A mean over runs with its interval; lo and hi NaN where there is none."""

    mean: float
    lo: float
    hi: float
    n_runs: int


def outcomes(rate: float, n: int) -> np.ndarray:
    """(n,) 0/1 outcomes of n pairs of which a share `rate` is right (round(rate · n) ones):
    a run's pairs as the stitching table keeps them (an IIA over n_tested pairs)."""
    n = int(n)
    ones = int(round(float(rate) * n)) if n else 0
    return np.concatenate([np.ones(ones), np.zeros(n - ones)])


def hierarchical_interval(runs: Sequence[np.ndarray], level: float = LEVEL,
                          n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """Mean over runs of each run's mean outcome, with its hierarchical-bootstrap interval at
    coverage `level`; `runs`: per run, its pairs' outcomes ((m_r,) floats, e.g. 1 where an
    interchange is right). Runs without pairs or with NaN outcomes are left out."""
    kept = _kept([runs])[0]
    return _interval([kept], lambda m: m[0], level, n_boot, seed)


def difference_interval(a: Sequence[np.ndarray], b: Sequence[np.ndarray],
                        same_pairs: bool = False, level: float = LEVEL,
                        n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """The mean over runs of (run mean of a) - (run mean of b), with its hierarchical
    bootstrap interval; a[i] and b[i] are run i's outcomes of two measures (e.g. stitched
    and B's own interchange on B's tested pairs). Runs are drawn once for both (paired by
    run). `same_pairs`: a[i][j] and b[i][j] are one pair's two outcomes, so each pair is drawn
    once for both (paired by pair; the arrays of a run must then have equal lengths); else
    each measure's pairs are drawn apart, as for outcomes rebuilt from shares (`outcomes`),
    whose order pairs nothing. A run missing either is left out."""
    if len(a) != len(b):
        raise ValueError(f"difference_interval: {len(a)} runs of a, {len(b)} of b")
    ka, kb = _kept([a, b])
    if same_pairs:
        if any(len(x) != len(y) for x, y in zip(ka, kb)):
            raise ValueError("difference_interval: same_pairs needs equal lengths in each run")
        return _interval([[x - y for x, y in zip(ka, kb)]], lambda m: m[0], level, n_boot,
                         seed)
    return _interval([ka, kb], lambda m: m[0] - m[1], level, n_boot, seed)


def crossed_interval(cells: Sequence[Sequence[np.ndarray | None]], same: bool = False,
                     other: Sequence[Sequence[np.ndarray | None]] | None = None,
                     same_pairs: bool = False, level: float = LEVEL, n_boot: int = N_BOOT,
                     seed: int = 0) -> Interval:
    """Mean over the cells (run i of X, run j of Y) of each cell's mean outcome, or of its
    difference with `other`'s cell mean, with a hierarchical bootstrap interval: runs of X
    and of Y drawn with replacement (the same draw for both sides when `same`: X and Y are
    one list of runs, the diagonal left out), then each drawn cell's pairs (drawn once for
    both measures with `same_pairs`). `cells[i][j]`: (m,) outcomes, or None / empty where
    the pair of runs has none. The interval is widened as `hierarchical_interval`'s over the
    fewer runs of the two sides; `n_runs` is that number."""
    if same and any(len(row) != len(cells) for row in cells):
        raise ValueError("crossed_interval: same needs a square grid (one list of runs)")
    measures = [cells] if other is None else [cells, other]
    grid = [[[_cell(m[i][j]) for j in range(len(cells[0]))] for i in range(len(cells))]
            for m in measures]
    nx, ny = len(cells), len(cells[0]) if len(cells) else 0
    ok = np.array([[all(len(g[i][j]) for g in grid) and not (same and i == j)
                    for j in range(ny)] for i in range(nx)], bool).reshape(nx, ny)
    if same_pairs and other is not None:
        grid = [[[grid[0][i][j] - grid[1][i][j] if ok[i, j] else grid[0][i][j]
                  for j in range(ny)] for i in range(nx)]]
    combine = (lambda m: m[0]) if len(grid) == 1 else (lambda m: m[0] - m[1])  # noqa: E731
    if not ok.any():
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    mean = float(combine([np.mean([g[i][j].mean() for i, j in zip(*np.nonzero(ok))])
                          for g in grid]))
    n = nx if same else min(nx, ny)
    if n < 2 or (same and nx < 3):
        return Interval(mean, float("nan"), float("nan"), n)
    rng = np.random.default_rng(seed)
    ix = rng.integers(nx, size=(n_boot, nx))
    iy = ix if same else rng.integers(ny, size=(n_boot, ny))
    drawn = ix[:, :, None] * ny + iy[:, None, :]  # (n_boot, nx, ny) the cell of each slot
    valid = ok.ravel()[drawn]  # (n_boot, nx, ny)
    flat = [[g[i][j] for i in range(nx) for j in range(ny)] for g in grid]
    means = [np.where(valid, _draw_means(f, drawn.reshape(n_boot, -1), rng).reshape(
        drawn.shape), 0.0) for f in flat]
    count = valid.sum((1, 2))
    keep = count > 0
    stats = combine([(m.sum((1, 2)) / np.maximum(count, 1))[keep] for m in means])
    tail = (1 - level) / 2
    q_lo, q_hi = np.quantile(stats, [tail, 1 - tail])
    c = _widening(n, level)
    return Interval(mean, float(mean - c * (mean - q_lo)), float(mean + c * (q_hi - mean)), n)


def _cell(values) -> np.ndarray:
    """A cell's outcomes as floats; empty where absent or NaN."""
    if values is None:
        return np.zeros(0)
    v = np.asarray(values, float).ravel()
    return v if np.isfinite(v).all() else np.zeros(0)


def _kept(measures: list[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """The runs every measure has pairs for, none NaN, in each measure's order."""
    arrays = [[np.asarray(r, float).ravel() for r in runs] for runs in measures]
    ok = [all(len(m[i]) and np.isfinite(m[i]).all() for m in arrays)
          for i in range(len(arrays[0]))]
    return [[r for r, keep in zip(m, ok) if keep] for m in arrays]


def _interval(measures: list[list[np.ndarray]], combine, level: float, n_boot: int,
              seed: int) -> Interval:
    """`combine` of the measures' means over runs, and its widened percentile interval over
    `n_boot` draws of runs (shared by the measures) and of pairs within each drawn run."""
    n = len(measures[0])
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    mean = float(combine([np.mean([r.mean() for r in m]) for m in measures]))
    if n < 2:
        return Interval(mean, float("nan"), float("nan"), n)
    rng = np.random.default_rng(seed)
    drawn = rng.integers(n, size=(n_boot, n))  # (n_boot, n) the runs of each draw
    stats = combine([_draw_means(m, drawn, rng).mean(1) for m in measures])  # (n_boot,)
    tail = (1 - level) / 2
    q_lo, q_hi = np.quantile(stats, [tail, 1 - tail])
    c = _widening(n, level)
    return Interval(mean, float(mean - c * (mean - q_lo)), float(mean + c * (q_hi - mean)), n)


def _draw_means(runs: list[np.ndarray], drawn: np.ndarray, rng) -> np.ndarray:
    """(n_boot, n) per draw and slot: the mean of the slot's drawn run's pairs, resampled with
    replacement (a run drawn twice gets two resamples)."""
    out = np.zeros(drawn.shape)
    for r, values in enumerate(runs):
        at = drawn == r  # (n_boot, n) the slots that drew run r
        k = int(at.sum())
        if not k or not len(values):
            continue
        if np.isin(values, (0.0, 1.0)).all():  # 0/1 outcomes: a binomial draw is the same
            out[at] = rng.binomial(len(values), values.mean(), size=k) / len(values)
        else:
            out[at] = values[rng.integers(len(values), size=(k, len(values)))].mean(1)
    return out


def _widening(n: int, level: float) -> float:
    """t_{n-1} / z at `level`, times sqrt(n / (n - 1)): the percentile interval's factor."""
    from scipy.stats import norm, t

    q = 0.5 + level / 2
    return float(t.ppf(q, n - 1) / norm.ppf(q) * np.sqrt(n / (n - 1)))
