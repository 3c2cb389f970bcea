"""Intervals over runs for measures between architectures, each run counted once [ours].

A comparison of architectures X and Y over seeds gives a matrix of run pairs (every X run
with every Y run). The pairs share runs, so they are not independent: nine pairs of three
runs each hold three runs' worth of evidence, not nine. The bootstrap here is hierarchical
(`study.core.bootstrap.crossed_interval`): each draw picks len(X) runs of X and len(Y) runs
of Y with replacement (for X = Y, one draw of runs on both sides, a run never paired with
itself), then each drawn pair of runs' tested pairs, and averages the measure; the interval
is the draws' percentile interval widened to Student's t width over the runs, which covers a
planted mean in at least 90 of 100 draws where the plain percentile interval over three runs
does not (tests/core/test_bootstrap.py). With one run
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

from study.core.bootstrap import crossed_interval, outcomes

N_BOOT = 2000  # bootstrap draws [ours]
LEVEL = 0.95  # two-sided percentile interval [ours]


def _cells(rows: pd.DataFrame, column: str, runs_a: list, runs_b: list) -> list[list]:
    """(len(runs_a), len(runs_b)) cells of `column` per (run, other_run): each a pair of
    runs' outcomes over its tested pairs where the row gives an IIA and `n_tested` (the 0/1
    outcomes of that share, `study.core.bootstrap.outcomes`), else its one value; None where
    absent, NaN or the same run."""
    cells = [[None] * len(runs_b) for _ in runs_a]
    ia = {r: i for i, r in enumerate(runs_a)}
    ib = {r: j for j, r in enumerate(runs_b)}
    n = rows["n_tested"] if "n_tested" in rows else pd.Series(np.nan, index=rows.index)
    rate = column.endswith("iia")
    for run, other, v, m in zip(rows["run"], rows["other_run"], rows[column], n):
        if run == other or run not in ia or other not in ib or pd.isna(v):
            continue
        use_pairs = rate and not pd.isna(m) and m > 0 and 0.0 <= v <= 1.0
        cells[ia[run]][ib[other]] = outcomes(v, int(m)) if use_pairs else np.array([float(v)])
    return cells


def run_interval(cells, same: bool, other=None, n_boot: int = N_BOOT, level: float = LEVEL,
                 seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi) over the cells (runs of X in rows, runs of Y in columns; `other`: the
    cells subtracted), the interval from a hierarchical bootstrap over runs and the pairs in
    each (`study.core.bootstrap.crossed_interval`). No interval (NaN ends) where no draw of
    runs can differ from another: one run a side, or two runs of one architecture."""
    got = crossed_interval(cells, same=same, other=other, level=level, n_boot=n_boot, seed=seed)
    na, nb = len(cells), len(cells[0]) if cells else 0
    if (same and na < 3) or (not same and na < 2 and nb < 2):
        return got.mean, float("nan"), float("nan")
    return got.mean, got.lo, got.hi


def by_architecture(rows: pd.DataFrame, columns: list[str],
                    differences: dict[str, tuple[str, str]] | None = None,
                    n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Per ordered (model, other_model): n_runs, n_other_runs, n_pairs and, for each column
    and each difference name -> (a, b) (the column a - b), its mean, lo and hi over runs.
    `rows`: one per (run, other_run) with columns run, other_run, model, other_model."""
    out = []
    for (ma, mb), g in rows.groupby(["model", "other_model"], sort=False):
        runs_a = sorted(set(g["run"]))
        runs_b = sorted(set(g["other_run"]))
        same = ma == mb
        if same:
            runs_a = runs_b = sorted(set(runs_a) | set(runs_b))
        row = dict(model=ma, other_model=mb, n_runs=len(runs_a), n_other_runs=len(runs_b),
                   n_pairs=int((g["run"] != g["other_run"]).sum()))
        for name in columns:
            mean, lo, hi = run_interval(_cells(g, name, runs_a, runs_b), same, n_boot=n_boot,
                                        seed=seed)
            row.update({name: mean, f"{name}_lo": lo, f"{name}_hi": hi})
        for name, (a, b) in (differences or {}).items():
            mean, lo, hi = run_interval(_cells(g, a, runs_a, runs_b), same,
                                        other=_cells(g, b, runs_a, runs_b), n_boot=n_boot,
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
