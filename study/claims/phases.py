"""Phase boundaries of a training trajectory: where accuracy jumps from one plateau to the next.

Small networks on these tasks learn in phases (binding: ≈12 % → ≈56 % → > 99.9 %; assign_add:
the no-variable problems first, then the variables). [ours] The trajectory is fitted with a
piecewise-constant function of 1, 2 or 3 plateaus (exact least squares over all split points,
in evaluation order); a plateau is kept only if it explains a real share of the variance and
its level differs from its neighbours' by at least `min_jump`. A boundary is reported at the
first evaluation of the later plateau whose accuracy passes the midpoint of the two levels.
A curve still rising at the end has a last plateau below its final accuracy: the report shows
both. `learned_from` gives the step from which a curve stays above a bar.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_POINTS = 1000


@dataclass(frozen=True)
class Phases:
    levels: tuple[float, ...]  # mean accuracy of each plateau, in order
    boundaries: tuple[int, ...]  # training step where each later plateau starts


def detect(steps, acc, max_phases: int = 3, min_jump: float = 0.1,
           min_gain: float = 0.5) -> Phases:
    """Plateaus and boundaries of `acc` (one value per evaluation at `steps`).

    A fit with one more plateau is accepted if it removes at least `min_gain` of the
    remaining squared error and all adjacent levels differ by `min_jump` or more."""
    steps = np.asarray(steps)
    order = np.argsort(steps, kind="stable")
    x, y = steps[order], np.asarray(acc, dtype=float)[order]
    if len(y) > MAX_POINTS:  # the 3-plateau search is quadratic in the number of evaluations
        keep = np.unique(np.linspace(0, len(y) - 1, MAX_POINTS).round().astype(int))
        x, y = x[keep], y[keep]
    if len(y) == 0:
        return Phases((), ())
    best = _fit(y, 1)
    for n in range(2, max_phases + 1):
        cand = _fit(y, n)
        if cand is None:
            break
        sse_prev, sse_new = best[0], cand[0]
        levels = cand[2]
        if sse_prev <= 1e-12 or (sse_prev - sse_new) / sse_prev < min_gain:
            break
        if min(abs(b - a) for a, b in zip(levels, levels[1:])) < min_jump:
            break
        best = cand
    _, cuts, levels = best
    bounds = []
    for (start, end), lo, hi in zip(zip(cuts[:-1], cuts[1:]), levels, levels[1:]):
        mid = (lo + hi) / 2
        seg = y[end:]  # the later plateau onwards
        rising = hi > lo
        hit = np.nonzero(seg >= mid if rising else seg <= mid)[0]
        bounds.append(int(x[end + hit[0]]) if len(hit) else int(x[end]))
    return Phases(tuple(float(v) for v in levels), tuple(bounds))


def learned_from(steps, acc, bar: float) -> int | None:
    """The first evaluation step from which accuracy stays at or above `bar` to the end of
    training (a one-off spike above the bar that falls back does not count); None where the
    last evaluation is below it."""
    steps = np.asarray(steps)
    order = np.argsort(steps, kind="stable")
    x, y = steps[order], np.asarray(acc, dtype=float)[order]
    if len(y) == 0 or not y[-1] >= bar:
        return None
    below = np.nonzero(~(y >= bar))[0]
    return int(x[below[-1] + 1] if len(below) else x[0])


def _fit(y: np.ndarray, n: int):
    """Exact least-squares piecewise-constant fit with n segments of >= 1 point:
    (sse, segment starts + [len], levels), or None if there are too few points."""
    m = len(y)
    if m < n:
        return None
    c1 = np.concatenate([[0.0], np.cumsum(y)])
    c2 = np.concatenate([[0.0], np.cumsum(y * y)])

    def sse(i, j):  # squared error of y[i:j] around its mean (vectorised over i, j)
        cnt = j - i
        s = c1[j] - c1[i]
        return c2[j] - c2[i] - s * s / cnt

    if n == 1:
        cuts = [0, m]
    elif n == 2:
        b = np.arange(1, m)
        cost = sse(0, b) + sse(b, m)
        cuts = [0, int(b[np.argmin(cost)]), m]
    else:  # n == 3: all (b1 < b2) pairs, O(m^2) but m is the number of evaluations
        b1, b2 = np.triu_indices(m, k=1)
        keep = b1 >= 1
        b1, b2 = b1[keep], b2[keep]
        if len(b1) == 0:
            return None
        cost = sse(0, b1) + sse(b1, b2) + sse(b2, m)
        i = int(np.argmin(cost))
        cuts = [0, int(b1[i]), int(b2[i]), m]
    levels = [float(y[a:b].mean()) for a, b in zip(cuts[:-1], cuts[1:])]
    total = sum(float(sse(a, b)) for a, b in zip(cuts[:-1], cuts[1:]))
    return total, cuts, levels
