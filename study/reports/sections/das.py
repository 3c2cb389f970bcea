"""Section: Distributed Alignment Search — interchange-intervention accuracy (IIA, on the pairs
that test the intervention) against the subspace size k, for the orthogonal (OAF) and linear
(LAF, and the authors' LAF where it ran) alignments and the untrained random rotation (table
`das`), one colour per architecture, with each trained alignment's controls where they ran:
the same search with the variable's values shuffled across pairs (table `das_shuffled`) and
on the untrained step-0 network (table `das_control`), both climbing the search's k ladder
(`das.control_k`, by default every k), so they are lines beside it. A table gives each pair
set's chance level (the `chance` column), and where the task has control pairs for a
variable (binding's renamed letters, table `das_transfer`), a table gives what the trained
alignments do on them."""
from __future__ import annotations

import itertools

import altair as alt
import pandas as pd

from study.core.alignments import kinds
from study.core.sites import site_label
from study.core.tables import DAS, DAS_CONTROL, DAS_SHUFFLED, DAS_TRANSFER
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import (HEIGHT, model_color, several_seeds, spread, stacked,
                                            variable_panels)

# line styles: the trained alignments' in the registry's order, the control's dotted
TRAINED_DASHES = ([1, 0], [6, 3], [3, 2, 1, 2], [8, 2, 2, 2], [4, 4])
CONTROL_DASH = [2, 2]
CONTROLS = {DAS_SHUFFLED.name: "shuffled", DAS_CONTROL.name: "step 0"}  # table -> label
SHAPES = {"shuffled": "triangle-up", "step 0": "square"}


def dashes() -> dict[str, list[int]]:
    """Each registered alignment's line style, in the registry's order (the trained ones take
    `TRAINED_DASHES` in turn)."""
    styles = itertools.cycle(TRAINED_DASHES)
    return {name: next(styles) if kind.trained else CONTROL_DASH
            for name, kind in kinds().items()}


def iia_curves(runs, controls: bool = False) -> pd.DataFrame | None:
    """Test IIA per (model, variable, site, alignment, control, k): mean/min/max over seeds.
    `control` is "" for the searched alignments; with `controls`, the control tables' rows too,
    labelled "shuffled" and "step 0"."""
    das = stacked(runs, DAS.name)
    if das is None:
        return None
    parts = [das.assign(control="")]
    for table, label in CONTROLS.items():
        ctl = stacked(runs, table) if controls else None
        if ctl is not None and len(ctl):
            parts.append(ctl.assign(control=label))
    d = pd.concat(parts, ignore_index=True)
    d = d[d["split"] == "test"].copy()
    d["site"] = [site_label(s, l, p) for s, l, p in zip(d["site"], d["layer"], d["position"])]
    return spread(d, ["model", "variable", "site", "alignment", "control", "k"], "iia")


@section("das", "Distributed Alignment Search", order=40)
def build(runs) -> list[Figure]:
    curves = iia_curves(runs, controls=True)
    if curves is not None:
        curves = curves.dropna(subset=["mean"])  # variables with too few tested pairs
    if curves is None or curves.empty:
        return []
    seeds = several_seeds(runs)
    variables = list(dict.fromkeys(curves["variable"]))
    columns, width = variable_panels(len(variables))  # two panels a row
    searched = curves[curves["control"] == ""]
    controls = curves[curves["control"] != ""]
    dash_of = dashes()
    alignments = [a for a in dash_of if a in set(searched["alignment"])]
    ks = sorted(curves["k"].unique().tolist())
    y = alt.Y("mean:Q", title="IIA (test)" + (", mean over seeds" if seeds else ""),
              scale=alt.Scale(domain=[0, 1]))
    tip = ["model:N", "variable:N", "site:N", "alignment:N", "control:N", "k:Q",
           alt.Tooltip("mean:Q", format=".3f", title="IIA"),
           alt.Tooltip("min:Q", format=".3f"), alt.Tooltip("max:Q", format=".3f"),
           "n_seeds:Q"]
    kinds = [c for c in SHAPES if c in set(controls["control"])]
    shape = alt.Shape("control:N", sort=kinds, title="control", scale=alt.Scale(
        domain=kinds, range=[SHAPES[c] for c in kinds]))
    if len(ks) == 1:  # one k: no line to tell the alignments apart; they go on the x axis
        layers = _one_k(curves, ks[0], alignments, len(controls) > 0, seeds, y, tip, shape,
                        runs)
    else:
        layers = _k_curves(ks, alignments, dash_of, len(controls) > 0, seeds, y, tip, shape,
                           runs)
    chart = alt.layer(*layers, data=curves).properties(width=width, height=HEIGHT).facet(
        facet=alt.Facet("variable:N", title=None, sort=variables),
        columns=columns)
    at = sorted(controls["k"].unique().tolist()) if len(controls) else []
    where = ("" if not at else f" at k = {', '.join(map(str, at))}" if len(at) < len(ks)
             else " at every k")
    return [_iia_figure(chart, at, where, seeds, ks), *_chance_figure(runs),
            *_transfer_figure(runs)]


def _k_curves(ks, alignments, dash_of, controls: bool, seeds, y, tip, shape, runs) -> list:
    """The layers of a search over several k: a line per alignment (its style) and site,
    filled points, a band for the range over seeds, thin lines and hollow shapes for the
    controls."""
    x = alt.X("k:Q", scale=alt.Scale(type="log", base=2), title="subspace size k",
              axis=alt.Axis(values=ks))
    dash = alt.StrokeDash("alignment:N", sort=alignments, scale=alt.Scale(
        domain=alignments, range=[dash_of[a] for a in alignments]),
        legend=alt.Legend(symbolType="stroke", symbolStrokeColor="gray", symbolSize=300))
    is_searched = alt.datum.control == ""
    # the points are a layer of their own: a line with `point=True` draws its legend as dots,
    # so the line-style legend would show no line styles
    layers = [alt.Chart().mark_line().encode(
        x=x, y=y, detail="site:N", strokeDash=dash, color=model_color(runs),
        tooltip=tip).transform_filter(is_searched),
        alt.Chart().mark_point(filled=True, size=30, opacity=1).encode(
        x=x, y=y, color=model_color(runs), tooltip=tip).transform_filter(is_searched)]
    if seeds:  # after the lines: a legend takes its symbols from the first layer's mark
        layers.append(alt.Chart().transform_filter(is_searched).mark_area(opacity=0.15).encode(
            x=x, y="min:Q", y2="max:Q", detail=[alt.Detail("site:N"), alt.Detail("alignment:N")],
            color=model_color(runs)))
    if controls:
        layers.append(alt.Chart().transform_filter(~is_searched).mark_line(
            strokeWidth=1, opacity=0.6).encode(
            x=x, y=y, detail=[alt.Detail("site:N"), alt.Detail("alignment:N"),
                              alt.Detail("control:N")],
            strokeDash=dash, color=model_color(runs)))
        layers.append(alt.Chart().transform_filter(~is_searched).mark_point(
            filled=False, size=50).encode(
            x=x, y=y, shape=shape, color=model_color(runs), tooltip=tip))
    return layers


def _one_k(curves, k: int, alignments, controls: bool, seeds, y, tip, shape, runs) -> list:
    """The layers of a search at a single k: each alignment a column of marks, filled for
    the search, hollow shapes for its controls, a rule for the range over seeds."""
    names = alignments + [a for a in dict.fromkeys(curves["alignment"]) if a not in alignments]
    x = alt.X("alignment:N", sort=names, title=f"alignment, at k = {k}",
              axis=alt.Axis(labelAngle=0))
    off = alt.XOffset("model:N")
    is_searched = alt.datum.control == ""
    layers = [alt.Chart().mark_point(filled=True, size=60, opacity=1).encode(
        x=x, xOffset=off, y=y, color=model_color(runs), tooltip=tip).transform_filter(
        is_searched)]
    if seeds:
        layers.append(alt.Chart().transform_filter(is_searched).mark_rule(opacity=0.5).encode(
            x=x, xOffset=off, y="min:Q", y2="max:Q", color=model_color(runs)))
    if controls:
        layers.append(alt.Chart().transform_filter(~is_searched).mark_point(
            filled=False, size=60).encode(
            x=x, xOffset=off, y=y, shape=shape, color=model_color(runs), tooltip=tip))
    return layers


def _chance_figure(runs) -> list[Figure]:
    """Each pair set's chance level per architecture (mean over seeds), test and train."""
    das = stacked(runs, DAS.name)
    if das is None or "chance" not in das:
        return []
    d = das.drop_duplicates(["run", "variable", "site", "layer", "position", "split"])
    table = (d.groupby(["model", "variable", "split"], sort=False)["chance"].mean().round(3)
             .unstack("split").reset_index())
    return [Figure(key="das-chance", title="DAS: chance level per pair set",
                   caption=("The share of a pair set's tested pairs that an intervention gets "
                            "right by giving each the counterfactual answer of another tested "
                            "pair at random (the sum of the squared shares of the answers): "
                            "the floor an IIA is read against; mean over seeds."),
                   table=table)]


def _transfer_figure(runs) -> list[Figure]:
    """The trained alignments on the task's control pairs (`das_transfer`), mean over seeds."""
    d = stacked(runs, DAS_TRANSFER.name)
    if d is None or d.empty:
        return []
    d = d.assign(site=[site_label(s, l, p) for s, l, p in
                       zip(d["site"], d["layer"], d["position"])])
    table = (d.groupby(["model", "variable", "pairs", "site", "alignment", "k"], sort=False)
             [["iia", "base_kept", "chance"]].mean().round(3).reset_index()
             .rename(columns={"iia": "control label", "base_kept": "base answer kept"}))
    return [Figure(key="das-transfer", title="DAS: the trained alignments on control pairs",
                   caption=("Each trained alignment of a variable (and the random rotation), "
                            "at each k, applied without training to the task's control pairs "
                            "for it (binding's renamed letters: the source is the base with "
                            "its letters consistently renamed, so each line keeps its role "
                            "and the answer its digit). 'control label': the share of tested "
                            "pairs whose answer is the one the variable's letter identity "
                            "gives (the alignment moves the letter, as a copy of the token "
                            "would); 'base answer kept': the share whose answer stays the "
                            "base's (it moves the role, which the renamed source shares, or "
                            "nothing); mean over seeds."),
                   table=table)]


def _iia_figure(chart, at, where, seeds, ks) -> Figure:
    if len(ks) == 1:
        return Figure(
            key="das-iia", title=f"DAS: IIA at subspace size k = {ks[0]}",
            caption=("Test IIA on the pairs that test the intervention (the network gives the "
                     "base answer and not the counterfactual one), searched at this one k: "
                     "one column per alignment (OAF orthogonal; LAF a rotation times the "
                     "authors' symmetric matrix; laf_sd the authors' LAF trained their way; "
                     "random the untrained random-rotation control), one colour per "
                     "architecture."
                     + (" Hollow marks: each trained alignment's controls, triangles the same "
                        "search with the variable's values shuffled across pairs, squares the "
                        "search on the untrained (step-0) network." if at else
                        " No control search ran: the random rotation is the only control.")
                     + (" Filled marks: the mean over seeds; rules: their range." if seeds
                        else "")),
            chart=chart)
    return Figure(
        key="das-iia", title="DAS: IIA against subspace size k",
        caption=("Test IIA on the pairs that test the intervention (the network gives the base "
                 "answer and not the counterfactual one). Lines: solid OAF, dashed LAF (a "
                 "rotation times the authors' symmetric matrix), dash-dotted the authors' LAF "
                 "trained their way, dotted the random-rotation control; one colour per "
                 "architecture (sites: the recurrent state; the residual stream at the searched "
                 "layers, by default the middle one; each site its own line)."
                 + (f" Hollow marks{where}: each trained alignment's controls, triangles the "
                    "same search with the variable's values shuffled across pairs, squares the "
                    "search on the untrained (step-0) network (lines join them where they ran "
                    "at several k)." if at else "")
                 + " A variable is aligned where IIA rises well above the controls, and the "
                 "smallest k that reaches the top is the size of its subspace"
                 + (" (bands: range over seeds)." if seeds else ".")),
        chart=chart)
