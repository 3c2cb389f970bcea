"""The atlas's heat maps, which open the section "What the architectures share"
(`atlas.py`): where each family holds each variable. One heat map per family and variable: token role (x, in the sequence's order) by site (y, the deepest layer on top),
coloured by the test IIA of the cell's best estimate (the full search where one ran, else
the screening pass), averaged over the family's runs. A cell that does not beat the null,
the controls' maximum over the whole grid (table `atlas`, `study/analyses/atlas/`), in
every run of the family is drawn grey and its value struck out of the colour scale, so
that only credited cells carry colour."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.sites import site_label
from study.core.tables import ATLAS
from study.reports.figure import Figure, slug
from study.reports.sections._common import PLOT_WIDTH

GREY = "#d9d9d9"


def atlas_data(runs) -> pd.DataFrame | None:
    """One row per (family, variable, role, site): the mean IIA over the family's runs of
    each cell's best estimate, how many runs credit it, and the family's highest null."""
    parts = []
    for r in runs:
        df = r.final(ATLAS.name)
        if df is None:
            continue
        # the full search's row where one ran at the cell, else the screening row
        df = (df.assign(_full=df["stage"] == "full")
              .sort_values("_full").drop_duplicates(["variable", "role", "site", "layer"],
                                                    keep="last"))
        order = {role: i for i, role in enumerate(dict.fromkeys(r.final(ATLAS.name)["role"]))}
        parts.append(df.assign(family=r.model, run=r.label,
                               role_order=df["role"].map(order)))
    if not parts:
        return None
    df = pd.concat(parts, ignore_index=True)
    df["site_layer"] = [site_label(s, l) for s, l in zip(df["site"], df["layer"])]
    out = (df.groupby(["family", "variable", "role", "site_layer", "layer"], sort=False)
           .agg(iia=("iia", "mean"), credited=("credited", "sum"), runs=("run", "nunique"),
                null=("null", "max"), stage=("stage", lambda s: ",".join(sorted(set(s)))),
                role_order=("role_order", "min"))
           .reset_index())
    out["shown"] = out["credited"] == out["runs"]  # credited in every run of the family
    out["credit"] = [f"{c} of {n} runs" for c, n in zip(out["credited"], out["runs"])]
    return out


def _chart(d: pd.DataFrame, family: str, variable: str):
    roles = list(d.sort_values("role_order")["role"].drop_duplicates())
    layers = sorted(set(d["site_layer"]), key=lambda s: -int(s.split("[")[1][:-1])
                    if "[" in s else 0)
    x = alt.X("role:N", sort=roles, title="token role",
              axis=alt.Axis(labelAngle=-60, labelLimit=80))
    y = alt.Y("site_layer:N", sort=layers, title="site")
    tooltip = ["role:N", "site_layer:N", alt.Tooltip("iia:Q", format=".3f", title="IIA"),
               alt.Tooltip("null:Q", format=".3f", title="null (grid max of controls)"),
               alt.Tooltip("credit:N", title="above the null in"), "stage:N"]
    base = alt.Chart(d).encode(x=x, y=y, tooltip=tooltip)
    grey = base.transform_filter("!datum.shown").mark_rect(color=GREY)
    color = base.transform_filter("datum.shown").mark_rect().encode(
        color=alt.Color("iia:Q", title="IIA", scale=alt.Scale(domain=[0, 1],
                                                                scheme="viridis")))
    width = max(700, min(PLOT_WIDTH, 14 * len(roles)))
    return alt.layer(grey, color).properties(
        width=width, height=max(60, 28 * len(layers)),
        title=f"{family}: {variable} (null {d['null'].max():.2f})")


def atlas_figures(runs) -> list[Figure]:
    """One heat map per family and variable of the runs' atlas tables (none without)."""
    d = atlas_data(runs)
    if d is None:
        return []
    figures = []
    for (family, variable), part in d.groupby(["family", "variable"], sort=False):
        figures.append(Figure(
            key=slug("atlas", family, variable),
            title=f"Atlas: where {family} holds {variable}",
            caption=("Test IIA of a subspace of the variable at each token role (each pair "
                     "intervened where the role sits in its base and source) and site, mean "
                     "over the family's runs; grey: not above the null, the controls' "
                     "(shuffled values, step-0 network) maximum over the whole grid, in "
                     "every run."),
            chart=_chart(part, family, variable)))
    return figures
