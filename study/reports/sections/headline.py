"""Section: the headline numbers of every (model, seed) of a task, and their spread over seeds."""
from __future__ import annotations

import numpy as np
import pandas as pd

from study.core.tables import DAS
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import first_k_above, fmt, several_seeds, stacked

THRESHOLD = 0.9  # "the k where IIA first passes 0.9"


def headline_numbers(runs) -> pd.DataFrame:
    """One row per run: model, seed, accuracy per scored split, and per (variable, alignment)
    the best test IIA over k and sites and the smallest k reaching THRESHOLD (numbers)."""
    das = stacked(runs, DAS.name)
    rows = []
    for r in runs:
        row = {"run": r.label, "model": r.model, "seed": r.seed}
        for split, acc in sorted((r.summary.get("accuracy") or {}).items(),
                                 key=lambda kv: (kv[0] != "test", kv[0])):
            if isinstance(acc, dict) and "all" in acc:
                row[f"acc {split}"] = float(acc["all"])
        if das is not None:
            d = das[(das["run"] == r.label) & (das["split"] == "test")]
            for (var, al), g in d.groupby(["variable", "alignment"], sort=True):
                best = g["iia"].max()
                row[f"IIA {var} {al}"] = float(best) if pd.notna(best) else np.nan
                row[f"k@{THRESHOLD} {var} {al}"] = first_k_above(g, THRESHOLD)
        rows.append(row)
    return pd.DataFrame(rows)


def _display(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if c.startswith("k@"):
            out[c] = [("—" if pd.isna(v) else str(int(v))) for v in out[c]]
        elif c.startswith(("acc", "IIA")):
            out[c] = [fmt(v) for v in out[c]]
    return out


def spread_over_seeds(numbers: pd.DataFrame) -> pd.DataFrame:
    """Per model: mean ± standard deviation over seeds of every headline number."""
    cols = [c for c in numbers.columns if c.startswith(("acc", "IIA", "k@"))]
    rows = []
    for model, g in numbers.groupby("model", sort=True):
        row = {"model": model, "seeds": len(g)}
        for c in cols:
            v = g[c].dropna()
            text = fmt(v.mean(), v.std(ddof=1) if len(v) > 1 else 0.0, len(v),
                       digits=1 if c.startswith("k@") else 3) if len(v) else "—"
            if 0 < len(v) < len(g):  # e.g. seeds whose IIA never reached the threshold
                text += f" ({len(v)} of {len(g)} seeds)"
            row[c] = text
        rows.append(row)
    return pd.DataFrame(rows)


@section("headline", "Headline numbers", order=0)
def build(runs) -> list[Figure]:
    numbers = headline_numbers(runs)
    figs = [Figure(
        key="headline", title="Headline numbers per model and seed",
        caption=(f"Accuracy on each split, then for each causal variable and alignment the best "
                 f"test IIA (on the pairs that test the intervention: the network gives the base "
                 f"answer and not the counterfactual one; — where too few do) and "
                 f"the smallest k whose IIA passes {THRESHOLD} — compare architectures along "
                 f"a column."),
        table=_display(numbers))]
    if several_seeds(runs):
        figs.append(Figure(
            key="headline-spread", title="Headline numbers over seeds",
            caption="Mean ± standard deviation over seeds; a spread as large as the gap "
                    "between architectures means the gap is not established.",
            table=spread_over_seeds(numbers)))
    return figs
