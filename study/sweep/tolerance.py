"""The tolerance a rerun of a result folder is held to, measured when the folder is written and
stated in its `manifest.json` (`python -m study reproduce` reads it back).

On another build (another CPU's kernels, another torch, BLAS, thread count or device)
floating-point sums round differently from the first update on, so training follows a nearby
but different path, as another seed does on a smaller scale. How far a number may move is
therefore read off the study's own variation, not set as a round number:

- **over seeds**: per column, the range (largest − smallest) of the column over the seeds of
  each group of runs that differ only by seed (the same model, variable, alignment, site, k,
  ...), the median over the groups. A rerun of one seed is held to within how much the seeds
  of the study differ from each other.
- **an interval per value**: an IIA (or a gap, or a mean over runs) written with its 95 %
  interval also agrees where the committed interval and the rerun's overlap (`reproduce`);
  for an IIA that is its Wilson interval over the tested pairs.
- **updates**: a run stops at its target accuracy only at an evaluation, so `steps_done` and a
  phase's `start_step` move by whole evaluation intervals: at least one interval (the longest
  of the runs': `train.eval_every`, or the widest gap between checkpoints where it is 0),
  plus the stated fraction.
- **a floor**: where a study has one seed per group there is no spread to measure, and where
  the seeds agree exactly the range is 0; the margins of `result_tables.TOLERANCES` [ours] are
  then the tolerance (the manifest says which applied, per column).
"""
from __future__ import annotations

import fnmatch
import math
from types import SimpleNamespace

import pandas as pd

# Per table: the columns that say what a number measures, apart from which seed's run it is
# (the groups whose spread over seeds is measured). Tables aggregated over runs (shared,
# alignment_gaps) have no seeds to spread; their intervals over runs stand in.
SEED_GROUPS: dict[str, tuple[str, ...]] = {
    "summary": ("task", "model", "scale", "steps"),
    "verdicts": ("model", "variable", "alignment"),
    "das_best": ("model", "variable", "alignment"),
    "comparisons": ("variable", "model", "other_model", "site", "other_site", "alignment",
                    "k", "measure"),
    "run_gaps": ("model", "variable", "k", "alignment"),
    "das_curve": ("model", "variable", "alignment", "site", "layer", "position", "k"),
    "emergence": ("model", "variable", "role", "site", "layer", "k", "step"),
}
# columns measured in updates: at least one evaluation interval
IN_UPDATES = {("summary", "steps_done"), ("phases", "start_step")}


def _seed_of(df: pd.DataFrame) -> pd.Series | None:
    if "seed" in df.columns:
        return df["seed"]
    if "run" in df.columns:  # "<model> s<seed>", the runs' labels
        return df["run"].astype(str).str.extract(r" s(\d+)")[0]
    return None


def seed_spread(df: pd.DataFrame, column: str, groups: tuple[str, ...]) -> tuple[float, int]:
    """(median over groups of the column's range over seeds, most seeds in a group); NaN where
    no group holds two seeds with values."""
    seeds = _seed_of(df)
    keys = [g for g in groups if g in df.columns]
    if seeds is None or not keys or column not in df.columns or df.empty:
        return math.nan, 0
    d = df.assign(_seed=seeds)
    ranges, most = [], 0
    for _, g in d.groupby(keys, sort=False, dropna=False):
        v = pd.to_numeric(g[column], errors="coerce").dropna()
        n = int(g.loc[v.index, "_seed"].nunique())
        most = max(most, n)
        if n >= 2:
            ranges.append(float(v.max() - v.min()))
    return (float(pd.Series(ranges).median()) if ranges else math.nan), most


def eval_interval(train: dict) -> int:
    """The updates between two evaluations of a run with these `train` settings (the widest,
    where it evaluates at checkpoints only)."""
    from study.train.schedule import auto_intervals, checkpoint_steps
    steps = int(train.get("steps") or 0)
    cfg = SimpleNamespace(steps=steps, log_every=train.get("log_every") or 0,
                          eval_every=train.get("eval_every") or 0,
                          target_accuracy=train.get("target_accuracy"))
    every = auto_intervals(cfg)[1]
    if every:
        return int(every)
    points = checkpoint_steps(steps, int(train.get("checkpoints") or 1)) if steps else [0]
    return int(max((b - a for a, b in zip(points, points[1:])), default=0))


def _floor(floors: dict, column: str) -> tuple[float, float] | None:
    for pattern, tol in floors.items():
        if fnmatch.fnmatchcase(column, pattern):
            return float(tol[0]), float(tol[1])
    return None


def measured_tolerances(tables: dict[str, pd.DataFrame], floors: dict, runs) -> dict:
    """Per table and measured column: {"abs", "rel", "basis"}, the abs part measured over the
    study's seeds (or evaluation intervals) and never below the floor's."""
    interval = max((eval_interval((r.config or {}).get("train") or {}) for r in runs), default=0)
    out: dict[str, dict] = {}
    for name, df in tables.items():
        cols = {}
        for column in (c for c in df.columns if _floor(floors.get(name, {}), c) is not None):
            low, rel = _floor(floors[name], column)
            spread, n = seed_spread(df, column, SEED_GROUPS.get(name, ()))
            basis = ("floor (no seeds in this table: its intervals over runs stand in)"
                     if name not in SEED_GROUPS else "floor (one seed per group)" if n < 2
                     else "floor (the seeds agree within it)")
            tol = low
            if not math.isnan(spread) and spread > tol:
                tol, basis = spread, f"range over {n} seeds (median over groups)"
            if (name, column) in IN_UPDATES and interval > tol:
                tol, basis = float(interval), f"one evaluation interval ({interval} updates)"
            cols[column] = {"abs": round(tol, 6), "rel": rel, "basis": basis}
        out[name] = cols
    return out
