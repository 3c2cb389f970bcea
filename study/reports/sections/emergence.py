"""Section: when each variable appears along training, in every family on one time axis
(tables `emergence`, `study/analyses/emergence/`) [ours; Wu et al. 2025 draw the binding
mechanism's appearance against one transformer's accuracy phases].

One chart per task, a panel per variable: each run's IIA at its atlas cell at every scored
checkpoint (a line per run, coloured by family, its 95 % interval a band), the run's overall
accuracy (dashed, same colour), its detected phase boundaries (ticks at the top) and the
atlas's null (dotted rule), on the log step axis of the trajectories; above it, the
sentences of `study.claims.emergence.timeline` ("gru s0's resolved appears at update 900,
before its accuracy leaves the plateau (phase boundary 1,200)")."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.claims.curves import accuracy_curves
from study.claims.emergence import accuracy_boundaries, stacked_emergence, timeline
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import PLOT_WIDTH, TALL, model_color, step_axis


def emergence_data(runs) -> pd.DataFrame | None:
    """Long rows for the chart, one `layer` each: iia (value, lo, hi), accuracy, boundary
    and null, every one tagged with its variable's panel, run and family."""
    rows = stacked_emergence(runs)
    if rows is None:
        return None
    variables = list(dict.fromkeys(rows["variable"]))
    parts = [pd.DataFrame({"layer": "iia", "variable": rows["variable"], "run": rows["run"],
                           "model": rows["model"], "step": rows["step"], "value": rows["iia"],
                           "lo": rows["iia_lo"], "hi": rows["iia_hi"]})]
    for r in runs:
        mine = rows[rows["run"] == r.label]
        if mine.empty:
            continue
        c = accuracy_curves(r)
        c = c[c["stratum"] == "all"]
        nulls = mine.groupby("variable")["null"].max()
        for v in variables:
            base = dict(variable=v, run=r.label, model=r.model)
            parts.append(pd.DataFrame({**base, "layer": "accuracy", "step": c["step"],
                                       "value": c["accuracy"]}))
            parts.append(pd.DataFrame([{**base, "layer": "boundary", "step": b, "value": 1.0}
                                       for b in accuracy_boundaries(r)],
                                      columns=["layer", *base, "step", "value"]))
            if v in nulls.index:
                parts.append(pd.DataFrame([{**base, "layer": "null", "value": nulls[v]}]))
    out = pd.concat([p for p in parts if len(p)], ignore_index=True)
    return out.assign(order=out["variable"].map({v: i for i, v in enumerate(variables)}))


def _chart(d: pd.DataFrame, runs):
    last = max(int(d["step"].max()), 1)
    x = step_axis("step", [last])
    title = "IIA (solid, 95 % band) · accuracy (dashed)"
    y = alt.Y("value:Q", title=title, scale=alt.Scale(domain=[0, 1]))
    color = model_color(runs)
    of = lambda layer: alt.Chart().transform_filter(f"datum.layer == '{layer}'")  # noqa: E731
    band = of("iia").mark_area(opacity=0.15, clip=True).encode(
        x=x, y=alt.Y("lo:Q", title=title, scale=alt.Scale(domain=[0, 1])), y2="hi:Q", color=color,
        detail="run:N")
    tip = ["run:N", "variable:N", "step:Q", alt.Tooltip("value:Q", format=".3f", title="IIA"),
           alt.Tooltip("lo:Q", format=".3f", title="95 % low"),
           alt.Tooltip("hi:Q", format=".3f", title="95 % high")]
    iia = of("iia").mark_line(point=True, strokeWidth=2, clip=True).encode(
        x=x, y=y, color=color, detail="run:N", tooltip=tip)
    acc = of("accuracy").mark_line(strokeDash=[5, 3], strokeWidth=1.2, clip=True).encode(
        x=x, y=y, color=color, detail="run:N",
        tooltip=["run:N", "step:Q", alt.Tooltip("value:Q", format=".3f", title="accuracy")])
    ticks = of("boundary").mark_tick(thickness=2, size=14, clip=True).encode(
        x=x, y=alt.value(TALL - 7), color=color,
        tooltip=["run:N", alt.Tooltip("step:Q", title="phase boundary")])
    null = of("null").mark_rule(strokeDash=[1, 2], clip=True).encode(
        y="value:Q", color=color,
        tooltip=["run:N", alt.Tooltip("value:Q", format=".3f", title="null")])
    order = list(d.sort_values("order")["variable"].drop_duplicates())
    return alt.layer(band, iia, acc, ticks, null, data=d).properties(
        width=PLOT_WIDTH, height=TALL).facet(
        row=alt.Row("variable:N", title=None, sort=order)).resolve_scale(x="shared")


@section("emergence", "When each variable appears during training", order=42)
def build(runs) -> list[Figure]:
    d = emergence_data(runs)
    if d is None:
        return []
    found = timeline(runs)
    table = found.drop(columns=["sentence"]).rename(columns={
        "appears_at": "appears at (update)", "boundaries": "accuracy phase boundaries"})
    return [Figure(
        key="emergence", title="When each variable appears during training, by family",
        caption=("Each run's IIA for each variable at the cell where its atlas holds it at the "
                 "end (line and 95 % band), searched at every logged checkpoint, beside its "
                 "overall accuracy (dashed), the accuracy's phase boundaries (ticks at the "
                 "bottom) and the atlas's null (dotted: the controls' maximum over the "
                 "whole grid). A variable appears where the band's lower edge rises above "
                 "the null and stays there; the step axis is logarithmic. Each earlier "
                 "checkpoint's search starts from the later one's alignment, so a dip "
                 "between two high checkpoints is one the warm start did not remove."),
        chart=_chart(d, runs), table=table,
        points=tuple(s + "." for s in found["sentence"]))]
