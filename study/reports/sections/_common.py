"""Helpers shared by the report sections: colours per architecture, seed aggregation,
site labels. Charts compare architectures on shared axes, so every section colours a model
the same way (`model_color`)."""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

WIDTH = 220  # px of one facet panel
HEIGHT = 160


def model_color(runs, field: str = "model", legend: bool = True) -> alt.Color:
    """One colour per architecture (or per run label), the same in every chart of a report."""
    domain = sorted({getattr(r, "label" if field == "run" else field) for r in runs})
    return alt.Color(f"{field}:N", title="model" if field == "model" else "run",
                     scale=alt.Scale(domain=domain, scheme="tableau10"),
                     **({} if legend else {"legend": None}))


def run_color(runs) -> alt.Color:
    """Colour by architecture when each has one run, else by run (for per-run lines)."""
    return model_color(runs, "run" if several_seeds(runs) else "model")


def several_seeds(runs) -> bool:
    """True if some architecture has more than one seed among the runs."""
    models = [r.model for r in runs]
    return len(set(models)) < len(models)


def spread(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Mean, min, max, standard deviation and count of `value` over seeds, per `by` group."""
    g = df.groupby(by, dropna=False)[value]
    out = g.agg(["mean", "min", "max", "std", "count"]).reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out.rename(columns={"count": "n_seeds"})


def stacked(runs, table: str, **extra) -> pd.DataFrame | None:
    """The latest checkpoint's rows of `table` from every run that has it, with run columns."""
    parts = []
    for r in runs:
        df = r.final(table)
        if df is not None:
            parts.append(df.assign(run=r.label, model=r.model, seed=r.seed, **extra))
    return pd.concat(parts, ignore_index=True) if parts else None


def fmt(mean: float, std: float = 0.0, n: int = 1, digits: int = 3) -> str:
    """'0.912' or '0.912 ± 0.004' (± one standard deviation over n seeds)."""
    if mean is None or (isinstance(mean, float) and np.isnan(mean)):
        return "—"
    return f"{mean:.{digits}f}" if n <= 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def first_k_above(df: pd.DataFrame, threshold: float = 0.9) -> float:
    """Smallest k whose IIA reaches `threshold` (NaN if none does)."""
    hit = df[df["iia"] >= threshold]
    return float(hit["k"].min()) if len(hit) else float("nan")
