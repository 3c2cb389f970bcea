"""A run's accuracy trajectory, as the claims and the reports read it from `metrics.parquet`:
the evaluation split, the accuracy per stratum at every evaluation, and the overall accuracy
on every scored split."""
from __future__ import annotations

import pandas as pd


def eval_split(run) -> str | None:
    """The split the trajectory is read on: `val` if the run scored it, else the first one
    (never `test`'s place to choose: `val` wins whenever it exists)."""
    m = run.metrics
    if m is None or m.empty:
        return None
    splits = [s for s in m["split"].unique() if s != "train"]
    return "val" if "val" in splits else (sorted(splits)[0] if splits else None)


def split_curves(run) -> pd.DataFrame:
    """step, split, accuracy (overall) on every scored split but train."""
    m = run.metrics
    if m is None or m.empty:
        return pd.DataFrame(columns=["step", "split", "accuracy"])
    m = m[(m["split"] != "train") & (m["metric"] == "accuracy") & (m["stratum"] == "all")]
    return pd.DataFrame({"step": m["step"].astype(int).to_numpy(), "split": m["split"].to_numpy(),
                         "accuracy": m["value"].astype(float).to_numpy()})


def accuracy_curves(run) -> pd.DataFrame:
    """step, family, stratum, value, accuracy on the run's evaluation split."""
    split = eval_split(run)
    if split is None:
        return pd.DataFrame(columns=["step", "family", "stratum", "value", "accuracy"])
    m = run.metrics
    m = m[(m["split"] == split) & (m["metric"] == "accuracy")]
    fam = m["stratum"].str.partition("=")
    out = pd.DataFrame({"step": m["step"].astype(int).to_numpy(),
                        "family": fam[0].to_numpy(), "stratum": m["stratum"].to_numpy(),
                        "value": fam[2].to_numpy(),
                        "accuracy": m["value"].astype(float).to_numpy()})
    return out.sort_values("step", kind="stable").reset_index(drop=True)
