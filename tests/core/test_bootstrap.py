"""The hierarchical bootstrap over runs and pairs (`study.core.bootstrap`): its 95 % interval
covers a planted mean as often as it says, over as few runs as the studies train, and its
differences are paired by run and by pair."""
from __future__ import annotations

import numpy as np
import pytest

from study.core import bootstrap
from study.core.bootstrap import (crossed_interval, difference_interval, hierarchical_interval,
                                  outcomes)

TRUE_MEAN = 0.7


def _planted(rng, n_runs, sd, n_pairs):
    """Per-run means drawn around TRUE_MEAN, each run's pairs Bernoulli around its mean."""
    means = np.clip(rng.normal(TRUE_MEAN, sd, n_runs), 0, 1)
    return [rng.binomial(1, p, size=n_pairs).astype(float) for p in means]


def _covered(n_runs, sd, n_pairs, widen=True, monkeypatch=None) -> int:
    if not widen:
        monkeypatch.setattr(bootstrap, "_widening", lambda n, level: 1.0)
    rng = np.random.default_rng(1)
    hits = 0
    for draw in range(100):
        iv = hierarchical_interval(_planted(rng, n_runs, sd, n_pairs), n_boot=1000, seed=draw)
        hits += iv.lo <= TRUE_MEAN <= iv.hi
    return hits


@pytest.mark.parametrize("n_runs,sd,n_pairs", [(3, 0.05, 200), (5, 0.05, 200), (3, 0.15, 50)])
def test_the_95_interval_covers_the_planted_mean_in_at_least_90_of_100_draws(n_runs, sd,
                                                                             n_pairs):
    assert _covered(n_runs, sd, n_pairs) >= 90


def test_the_plain_percentile_interval_over_three_runs_covers_too_little(monkeypatch):
    """What the widening is for: unwidened, three runs' interval misses the planted mean."""
    assert _covered(3, 0.05, 200, widen=False, monkeypatch=monkeypatch) < 90


def test_the_mean_weights_runs_alike_and_one_run_gives_no_interval():
    iv = hierarchical_interval([np.ones(10), np.zeros(1000)])
    assert iv.mean == 0.5 and iv.n_runs == 2 and iv.lo < 0.5 < iv.hi
    one = hierarchical_interval([np.ones(10), np.array([]), np.array([np.nan])])
    assert one.mean == 1.0 and one.n_runs == 1 and np.isnan(one.lo) and np.isnan(one.hi)


def test_outcomes_keep_a_runs_share_and_count():
    o = outcomes(0.8, 25)
    assert len(o) == 25 and o.sum() == 20 and set(o) <= {0.0, 1.0}
    assert len(outcomes(float("nan"), 0)) == 0


def test_a_difference_on_the_same_pairs_is_paired_by_pair():
    """Stitched and own right on the same pairs, the stitched write wrong on a fixed tenth of
    them: drawn pair by pair, the interval of stitched − own lies below 0 and is about half
    as wide as when each measure's pairs are drawn apart."""
    rng = np.random.default_rng(0)
    own = [rng.binomial(1, 0.8, size=300).astype(float) for _ in range(3)]
    stitched = [o * (np.arange(300) % 10 != 0) for o in own]
    d = difference_interval(stitched, own, same_pairs=True)
    assert d.mean == pytest.approx(np.mean([s.mean() - o.mean() for s, o in zip(stitched, own)]))
    apart = difference_interval(stitched, own)
    assert apart.n_runs == 3 and apart.mean == pytest.approx(d.mean)
    assert apart.lo < apart.mean < apart.hi
    assert d.hi < 0 and d.hi - d.lo < 0.6 * (apart.hi - apart.lo)
    with pytest.raises(ValueError, match="runs of a"):
        difference_interval(stitched, own[:2])
    with pytest.raises(ValueError, match="equal lengths"):
        difference_interval([s[:299] for s in stitched], own, same_pairs=True)


def test_a_difference_is_paired_by_run():
    """Two measures that share each run's level (stitched = own − 0.1 in every run, runs far
    apart): drawn run by run for both, the interval of the difference is narrow about −0.1,
    though each measure's own interval is wide."""
    levels = (0.5, 0.7, 0.9)
    own = [outcomes(p, 1000) for p in levels]
    stitched = [outcomes(p - 0.1, 1000) for p in levels]
    d = difference_interval(stitched, own)
    alone = hierarchical_interval(own)
    assert d.mean == pytest.approx(-0.1)
    assert d.lo < -0.1 < d.hi < 0 and (d.hi - d.lo) < 0.3 * (alone.hi - alone.lo)


def _crossed(rng, nx, ny, same, sd=0.05, n_pairs=200):
    """Cells of run i of X with run j of Y: each run's effect drawn around 0 (one set of runs
    when `same`), each cell's pairs Bernoulli around TRUE_MEAN plus both runs' effects."""
    a = rng.normal(0, sd, nx)
    b = a if same else rng.normal(0, sd, ny)
    return [[rng.binomial(1, np.clip(TRUE_MEAN + a[i] + b[j], 0, 1), size=n_pairs)
             .astype(float) for j in range(ny)] for i in range(nx)]


@pytest.mark.parametrize("nx,ny,same", [(3, 3, False), (3, 3, True), (3, 5, False)])
def test_the_crossed_interval_covers_the_planted_mean_in_at_least_90_of_100_draws(nx, ny,
                                                                                  same):
    """Stitching between runs: every run of X with every run of Y (one list of runs, never a
    run with itself, where X and Y are one architecture)."""
    rng = np.random.default_rng(2)
    hits = 0
    for draw in range(100):
        iv = crossed_interval(_crossed(rng, nx, ny, same), same, n_boot=1000, seed=draw)
        hits += iv.lo <= TRUE_MEAN <= iv.hi
    assert hits >= 90


def test_the_crossed_interval_leaves_out_the_diagonal_and_missing_cells():
    cells = [[np.ones(5), np.zeros(5), None], [np.zeros(5), np.ones(5), np.ones(5)],
             [np.ones(5), np.ones(5), np.ones(5)]]
    iv = crossed_interval(cells, same=True)  # the five off-diagonal cells present
    assert iv.mean == pytest.approx(3 / 5) and iv.n_runs == 3 and iv.lo < iv.mean < iv.hi
    two = crossed_interval(cells[:2], same=False)  # two runs of X, three of Y: all 5 cells
    assert two.mean == pytest.approx(3 / 5) and two.n_runs == 2 and np.isfinite(two.lo)
    d = crossed_interval(cells, same=True, other=[[np.ones(5)] * 3] * 3, same_pairs=True)
    assert d.mean == pytest.approx(3 / 5 - 1)
    square = [row[:2] for row in cells[:2]]  # two runs: one pair of them, drawn alike
    assert np.isnan(crossed_interval(square, same=True).lo)
    with pytest.raises(ValueError, match="square"):
        crossed_interval(cells[:2], same=True)
