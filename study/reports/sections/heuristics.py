"""Section: the task's shortcut rules (heuristics) against the models' accuracy, per stratum.

The heuristics table is written into the run directory by the run (`heuristics.parquet`:
heuristic, stratum, value, accuracy, n on the test split); the models' accuracy per stratum
comes from `summary.json`."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._common import HEIGHT, MIN_CHART, PLOT_WIDTH

MAX_VALUES = 25  # a stratum family with more values than this is left out of the chart


def comparison(runs) -> pd.DataFrame:
    """predictor, kind (heuristic | model), family, value, accuracy on the test split."""
    source = next((r for r in runs if r.heuristics is not None and not r.heuristics.empty), None)
    if source is None:
        return pd.DataFrame(columns=["predictor", "kind", "family", "value", "accuracy"])
    heur = source.heuristics
    # heuristics are scored on one task config's test split: compare the runs that share it
    runs = [r for r in runs if r.config.get("task_config") == source.config.get("task_config")]
    rows = [{"predictor": h.heuristic, "kind": "heuristic", "family": str(h.stratum),
             "value": str(h.value), "accuracy": float(h.accuracy)} for h in heur.itertuples()]
    keys = {(row["family"], row["value"]) for row in rows}
    for r in runs:
        acc = (r.summary.get("accuracy") or {}).get("test") or {}
        for key, value in acc.items():
            family, _, v = key.partition("=")
            fam, val = ("all", "all") if key == "all" else (family, v)
            if (fam, val) in keys:
                rows.append({"predictor": r.label, "kind": "model", "family": fam, "value": val,
                             "accuracy": float(value)})
    return pd.DataFrame(rows)


@section("heuristics", "Shortcut rules against the models", order=20)
def build(runs) -> list[Figure]:
    data = comparison(runs)
    if data.empty:
        return []
    predictors = list(dict.fromkeys(data["predictor"]))
    overall = data[data["family"] == "all"].pivot_table(
        index="predictor", values="accuracy", aggfunc="first").reindex(predictors).reset_index()
    overall["kind"] = overall["predictor"].map(dict(zip(data["predictor"], data["kind"])))
    figs = [Figure(
        key="heuristics-table", title="Heuristics against model accuracy (test split)",
        caption="A model near a heuristic's accuracy may be using that shortcut; a model far "
                "above every heuristic has learned more than the shortcuts.",
        table=overall[["predictor", "kind", "accuracy"]])]
    for family in [f for f in dict.fromkeys(data["family"]) if f != "all"]:
        d = pd.concat([data[data["family"] == "all"], data[data["family"] == family]])
        values = list(dict.fromkeys(d["value"]))
        if len(values) > MAX_VALUES:
            continue
        chart = alt.Chart(d).mark_bar().encode(
            x=alt.X("value:N", title=family, sort=values),
            xOffset=alt.XOffset("predictor:N", sort=predictors),
            y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("predictor:N", sort=predictors, scale=alt.Scale(scheme="tableau20")),
            opacity=alt.condition(alt.datum.kind == "model", alt.value(1.0), alt.value(0.55)),
            tooltip=["predictor:N", "kind:N", "value:N", alt.Tooltip("accuracy:Q", format=".3f")],
        ).properties(width=min(PLOT_WIDTH, max(MIN_CHART, 18 * len(values) * len(predictors)
                                               // 2)),
                     height=HEIGHT)
        figs.append(Figure(
            key=slug("heuristics", family), title=f"Heuristics and models by {family}",
            caption=(f"Test accuracy of each shortcut rule (faded) and each model (solid) per "
                     f"{family}: where a model's bars follow a rule's profile, it behaves like "
                     f"that rule."),
            chart=chart))
    return figs
