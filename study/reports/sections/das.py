"""Section: Distributed Alignment Search — interchange-intervention accuracy (IIA, on the pairs
that test the intervention) against the subspace size k, for the orthogonal (OAF) and linear
(LAF) alignments and both controls: the untrained random rotation (table `das`) and OAF/LAF
trained on the untrained step-0 network (table `das_control`), one colour per architecture."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.sites import site_label
from study.core.tables import DAS, DAS_CONTROL
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import HEIGHT, WIDTH, model_color, several_seeds, spread, stacked

DASH = {"oaf": [1, 0], "laf": [6, 3], "random": [2, 2],
        "oaf step 0": [1, 3], "laf step 0": [8, 2, 1, 2]}
CONTROL = " step 0"  # suffix of the alignments trained on the step-0 network


def iia_curves(runs, controls: bool = False) -> pd.DataFrame | None:
    """Test IIA per (model, variable, site, alignment, k): mean/min/max over seeds. With
    `controls`, the step-0 control's rows too, as alignments "oaf step 0", "laf step 0"."""
    das = stacked(runs, DAS.name)
    if das is None:
        return None
    if controls:
        ctl = stacked(runs, DAS_CONTROL.name)
        if ctl is not None and len(ctl):
            das = pd.concat([das, ctl.assign(alignment=ctl["alignment"] + CONTROL)],
                            ignore_index=True)
    d = das[das["split"] == "test"].copy()
    d["site"] = [site_label(s, l, p) for s, l, p in zip(d["site"], d["layer"], d["position"])]
    return spread(d, ["model", "variable", "site", "alignment", "k"], "iia")


@section("das", "Distributed Alignment Search", order=40)
def build(runs) -> list[Figure]:
    curves = iia_curves(runs, controls=True)
    if curves is not None:
        curves = curves.dropna(subset=["mean"])  # variables with too few tested pairs
    if curves is None or curves.empty:
        return []
    seeds = several_seeds(runs)
    figs = []
    variables = list(dict.fromkeys(curves["variable"]))
    alignments = [a for a in DASH if a in set(curves["alignment"])]
    d = curves
    enc = dict(
        x=alt.X("k:Q", scale=alt.Scale(type="log", base=2), title="subspace size k",
                axis=alt.Axis(values=sorted(d["k"].unique().tolist()))),
        color=model_color(runs),
    )
    line = alt.Chart().mark_line(point=True).encode(
        detail="site:N",
        y=alt.Y("mean:Q", title="IIA (test)" + (", mean over seeds" if seeds else ""),
                scale=alt.Scale(domain=[0, 1])),
        strokeDash=alt.StrokeDash("alignment:N", sort=alignments, scale=alt.Scale(
            domain=alignments, range=[DASH[a] for a in alignments]),
            legend=alt.Legend(symbolType="stroke", symbolStrokeColor="gray")),
        tooltip=["model:N", "variable:N", "site:N", "alignment:N", "k:Q",
                 alt.Tooltip("mean:Q", format=".3f", title="IIA"),
                 alt.Tooltip("min:Q", format=".3f"), alt.Tooltip("max:Q", format=".3f"),
                 "n_seeds:Q"], **enc)
    layers = [line]
    if seeds:
        layers.insert(0, alt.Chart().mark_area(opacity=0.15).encode(
            y="min:Q", y2="max:Q", detail=[alt.Detail("site:N"), alt.Detail("alignment:N")],
            x=enc["x"], color=model_color(runs, legend=False)))
    chart = alt.layer(*layers, data=d).properties(width=WIDTH, height=HEIGHT).facet(
        facet=alt.Facet("variable:N", title=None, sort=variables), columns=4)
    figs.append(Figure(
        key="das-iia", title="DAS: IIA against subspace size k",
        caption=("Test IIA on the pairs that test the intervention (the network gives the base "
                 "answer and not the counterfactual one). Solid OAF, dashed LAF, "
                 "dotted the random-rotation control, sparse dots and dash-dots OAF and LAF "
                 "trained on the untrained (step-0) network, one colour per architecture "
                 "(sites: the recurrent state, the middle of the residual stream): a variable "
                 "is aligned where IIA rises well above both controls, and the smallest k "
                 "that reaches the top is the size of its subspace"
                 + (" (bands: range over seeds)." if seeds else ".")),
        chart=chart))
    return figs
