"""Section: activation patching — where along (layer × position) or (time step) copying the
counterfactual source's activation flips the answer, where along the task's token roles
(each pair patched at its own position of the role: binding's query chain), and which heads
matter most.

Flip rates are over the pairs that test the intervention (`value`); a counterfactual kind with
no such pair (one whose answer must stay, e.g. binding's `distractor`) shows the rate over
all pairs (`value_all`: the answer kept); its facet label says so, and its heat-map rows are
drawn apart in greys, so that keeping the answer does not read as a flip."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.sites import site_label
from study.core.tables import HEAD_RANKING, PATCHING, PATCHING_ROLES, POSITIONS
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._common import PLOT_WIDTH, at_least, model_color, variable_panels
from study.reports.sections._heatmap import heatmap

METRIC = "flip_rate"
TOP_HEADS = 8
KEPT = " (answer kept, all pairs)"  # label suffix of kinds with no changed pair


def flip_values(df: pd.DataFrame) -> pd.DataFrame:
    """Flip-rate rows with `value` on tested pairs; kinds with none take `value_all` and a
    relabelled counterfactual (tables written before `value_all` existed pass unchanged)."""
    if "value_all" not in df.columns:
        return df
    none = df.groupby("counterfactual")["value"].transform(lambda v: v.isna().all())
    df = df.copy()
    df.loc[none, "value"] = df.loc[none, "value_all"]
    df.loc[none, "counterfactual"] = df.loc[none, "counterfactual"] + KEPT
    return df


def position_labels(run) -> pd.DataFrame | None:
    """position, label ("12 x": the position and a base example's token there; one example
    for every counterfactual kind, so the panels share their axis)."""
    pos = run.final(POSITIONS.name)
    if pos is None:
        return None
    pos = pos[pos["counterfactual"] == pos["counterfactual"].iloc[0]]
    return pd.DataFrame({"position": pos["position"].to_numpy(),
                         "label": [f"{int(p)} {t}" for p, t in zip(pos["position"], pos["token"])]})


def heatmap_data(run) -> pd.DataFrame | None:
    """Rows of the flip-rate grid of non-head sites at explicit positions (aligned pairs)."""
    df = run.final(PATCHING.name)
    if df is None:
        return None
    df = df[(df["metric"] == METRIC) & (df["site"] != "none") & (df["head"] == -1)
            & (df["position"] >= 0)]
    df = flip_values(df)
    if df.empty:
        return None
    df = df.assign(site_layer=[site_label(s, l) for s, l in zip(df["site"], df["layer"])])
    labels = position_labels(run)
    if labels is not None:
        df = df.merge(labels, on="position", how="left")
        df["label"] = df["label"].fillna(df["position"].astype(str))
    else:
        df = df.assign(label=df["position"].astype(str))
    return df[["counterfactual", "site_layer", "layer", "position", "label", "value"]]


def site_order(labels) -> list[str]:
    """Site labels top to bottom: the deepest layer first, as the stream flows upward."""
    return sorted(set(labels), key=lambda s: -int(s.split("[")[1][:-1]) if "[" in s else 0)


def shaded(d: pd.DataFrame, x: alt.X, y: alt.Y, tooltip: list, width: int, height: int):
    """The flip-rate heat map, one row of panels per counterfactual kind. Kinds whose answer
    must stay (`KEPT`: no pair tests a flip, e.g. binding's distractor) are drawn apart in
    greys on their own legend: a dark cell there means the answer was kept, not flipped."""
    header = alt.Header(labelAngle=0, labelAlign="left", labelOrient="left")
    kept = d["counterfactual"].str.endswith(KEPT)
    charts = []
    for part, scheme, title in ((d[~kept], "blues", "flip rate"),
                                (d[kept], "greys", "answer kept")):
        if part.empty:
            continue
        tip = [t if "flip rate" not in str(t) else alt.Tooltip("value:Q", format=".3f",
                                                                 title=title) for t in tooltip]
        charts.append(heatmap(part, x, y, "value", title=title, scheme=scheme, tooltip=tip,
                              width=width, height=height).facet(
            # labels read horizontally: a rotated one longer than its row overlaps the next
            row=alt.Row("counterfactual:N", title=None, header=header)))
    if len(charts) == 1:
        return charts[0]
    return alt.vconcat(*charts).resolve_scale(color="independent")


def role_data(run) -> pd.DataFrame | None:
    """Rows of the flip-rate grid (site x role) of non-head sites over every pair that has the
    role (stratum "all"); roles no pair has are left out. Roles keep the table's order."""
    df = run.final(PATCHING_ROLES.name)
    if df is None:
        return None
    df = df[(df["metric"] == METRIC) & (df["site"] != "none") & (df["head"] == -1)
            & (df["stratum"] == "all") & (df["n_pairs"] > 0)]
    df = flip_values(df)
    if df.empty:
        return None
    df = df.assign(site_layer=[site_label(s, l) for s, l in zip(df["site"], df["layer"])])
    return df[["counterfactual", "site_layer", "layer", "role", "value", "n_pairs"]]


def _role_heatmap(run) -> list[Figure]:
    d = role_data(run)
    if d is None:
        return []
    order = list(dict.fromkeys(d["role"]))
    layers = site_order(d["site_layer"])
    chart = shaded(
        d, alt.X("role:N", sort=order, title="token role (each pair's own position)",
                 axis=alt.Axis(labelAngle=0, labelLimit=90)),
        alt.Y("site_layer:N", sort=layers, title="site"),
        tooltip=["counterfactual:N", "site_layer:N", "role:N",
                 alt.Tooltip("value:Q", format=".3f", title="flip rate"),
                 alt.Tooltip("n_pairs:Q", title="pairs with the role")],
        width=at_least(80 * len(order)), height=max(60, 16 * len(layers)))
    return [Figure(
        key=slug("patching-roles", run.label), title=f"Role-aligned patching: {run.label}",
        caption=("The same flip rate with each pair patched where the role sits in its own "
                 "sequence (binding: the query chain's digit, its hops toward the query, the "
                 "queried letter, the answer), over the pairs that have the role: how the "
                 "value moves along the chain, layer by layer."),
        chart=chart)]


def pair_site_data(runs) -> pd.DataFrame | None:
    """Flip rates of pairs patched at their own positions (position -1), every run stacked."""
    parts = []
    for r in runs:
        df = r.final(PATCHING.name)
        if df is None:
            continue
        df = flip_values(df[(df["metric"] == METRIC) & (df["position"] == -1)
                               & (df["head"] == -1)])
        if (df["site"] != "none").sum() == 0:  # aligned pairs only: the heatmap shows them
            continue
        parts.append(df.assign(run=r.label, model=r.model, site_layer=[
            "unpatched" if s == "none" else site_label(s, l)
            for s, l in zip(df["site"], df["layer"])]))
    return pd.concat(parts, ignore_index=True) if parts else None


@section("patching", "Activation patching", order=30)
def build(runs) -> list[Figure]:
    figs = []
    for r in runs:
        d = heatmap_data(r)
        if d is None:
            continue
        order = list(dict.fromkeys(d.sort_values("position")["label"]))
        layers = site_order(d["site_layer"])
        rnn = set(d["site_layer"]) == {"state"}
        chart = shaded(
            d, alt.X("label:N", sort=order, title="time step" if rnn else "position (token)",
                     axis=alt.Axis(labelAngle=-60, labelFontSize=8)),
            alt.Y("site_layer:N", sort=layers, title="site"),
            tooltip=["counterfactual:N", "site_layer:N", "label:N",
                     alt.Tooltip("value:Q", format=".3f", title="flip rate")],
            width=min(PLOT_WIDTH, at_least(9 * len(order))), height=max(60, 16 * len(layers)))
        figs.append(Figure(
            key=slug("patching", r.label), title=f"Patching heatmap: {r.label}",
            caption=("Share of the pairs that test the intervention that flip to the "
                     "counterfactual answer when this site takes the source's activation: dark cells are where the variable "
                     "is carried, and how they move across layers traces its route."
                     + (" Kinds whose answer must stay (\"answer kept\") are drawn apart in "
                        "greys: dark there means the answer was kept."
                        if d["counterfactual"].str.endswith(KEPT).any() else "")),
            chart=chart))
        figs += _role_heatmap(r)
    pairs = pair_site_data(runs)
    if pairs is not None:
        chart = alt.Chart(pairs).mark_bar().encode(
            x=alt.X("run:N", title=None, sort=[r.label for r in runs]),
            y=alt.Y("value:Q", title="flip rate", scale=alt.Scale(domain=[0, 1])),
            # counterfactuals as rows (a task has many), sites as columns (a run has few), so
            # the chart grows down the page, not off its side
            color=model_color(runs), column=alt.Column("site_layer:N", title=None),
            row=alt.Row("counterfactual:N", title=None, header=alt.Header(
                labelAngle=0, labelAlign="left", labelOrient="left")),
            tooltip=["run:N", "counterfactual:N", "site_layer:N",
                     alt.Tooltip("value:Q", format=".3f")],
        ).properties(width=at_least(max(90, 28 * len(runs)), pairs["site_layer"].nunique()),
                     height=90)
        figs.append(Figure(
            key="patching-pair-sites", title="Patching at each pair's own positions",
            caption=("Flip rate, over the pairs that test the intervention, when the source's "
                     "activation at the variable's position is copied into the base at its "
                     "position: near 1 means the site carries the whole variable. Colour: the "
                     "architecture. 'unpatched' is the base alone: 0 on tested pairs by their "
                     "definition (the base gives its own answer, not the counterfactual one). "
                     "In a row marked 'answer kept' (a kind whose counterfactual answer is the "
                     "base's own, so no pair can test a flip) every pair is counted and the bar "
                     "is the share that keeps its answer, so the unpatched base scores near 1 "
                     "there and a lower bar is a patch that disturbed the answer."),
            chart=chart))
    figs += _head_rankings(runs)
    return figs


def _head_rankings(runs) -> list[Figure]:
    parts = []
    for r in runs:
        hr = r.final(HEAD_RANKING.name)
        if hr is None:
            continue
        hr = hr[(hr["metric"] == "logit_diff") & (hr["rank"] <= TOP_HEADS)]
        parts.append(hr.assign(run=r.label, model=r.model,
                               head_label=[f"{r.label} · L{int(l)}.H{int(h)}"
                                           for l, h in zip(hr["layer"], hr["head"])]))
    if not parts:
        return []
    d = pd.concat(parts, ignore_index=True)
    columns, width = variable_panels(d["counterfactual"].nunique())
    chart = alt.Chart(d).mark_bar().encode(
        y=alt.Y("head_label:N", sort=alt.EncodingSortField("value", order="descending"),
                title="head"),
        x=alt.X("value:Q", title="logit difference gained, summed over positions"),
        color=model_color(runs),
        facet=alt.Facet("counterfactual:N", title=None, columns=columns),  # beside their labels
        tooltip=["run:N", "counterfactual:N", "head_label:N", "rank:Q",
                 alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=width, height=max(60, 14 * min(TOP_HEADS, d.groupby("counterfactual")
                                                       .size().max()))
                 ).resolve_scale(y="independent")
    return [Figure(
        key="head-ranking", title="Head ranking by patching effect",
        caption=(f"The {TOP_HEADS} heads whose patched output moves the logit difference most "
                 f"toward the counterfactual answer: the top few are the circuit's candidates."),
        chart=chart)]
