"""Student's t interval over runs (seeds) [ours]: the seed verdicts
(`study.reports.sections.verdict`) and the paired alignment gaps
(`study.sweep.result_tables`) read it alike."""
from __future__ import annotations

import numpy as np

LEVEL = 0.95  # the interval's coverage


def t_interval(values: np.ndarray, level: float = LEVEL,
               sd: float | None = None) -> tuple[float, float, float]:
    """(mean, lo, hi): Student's t interval at coverage `level` for the mean of `values`
    ((n,) floats, none NaN), with the sample standard deviation or `sd` where given; lo and hi
    NaN under two values."""
    from scipy.stats import t

    v = np.asarray(values, dtype=float)
    mean = float(v.mean()) if v.size else float("nan")
    if v.size < 2:
        return mean, float("nan"), float("nan")
    spread = float(v.std(ddof=1)) if sd is None else float(sd)
    half = float(t.ppf(0.5 + level / 2, v.size - 1)) * spread / np.sqrt(v.size)
    return mean, mean - half, mean + half
