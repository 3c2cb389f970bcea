"""Section: the geometry of a variable's values in each architecture's aligned subspace (top
two principal components, one point per value with its spread), runs side by side; values
the task holds out of training are ringed. Anchor: `<task>-compare-geometry-<variable>`."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.tables import COMPARE_GEOMETRY
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.claims.cross import at_matched_k, cross_table
from study.claims.learnt import NOT_LEARNT_NOTE, any_not_learnt
from study.reports.sections._common import facet_columns, panel_width
from study.reports.sections._compare import k_note, run_order, sites_note


def geometry(runs):
    df = cross_table(runs, COMPARE_GEOMETRY.name)
    if df is None:
        return None
    return df.assign(lo1=df["pc1"] - df["sd1"], hi1=df["pc1"] + df["sd1"],
                     lo2=df["pc2"] - df["sd2"], hi2=df["pc2"] + df["sd2"],
                     held=df["held_out"].map({True: "held out", False: "trained"}))


@section("compare_geometry", "Same variable across architectures: geometry of its values",
         order=45)
def build(runs) -> list:
    g = geometry(runs)
    if g is None or g.empty:
        return []
    figs = []
    for variable in dict.fromkeys(g["variable"]):
        v = g[g["variable"] == variable]
        v = at_matched_k(v)
        order = run_order(runs, v["run"])
        v = v.assign(panel=v["run"] + " (k = " + v["k"].astype(int).astype(str) + ")")
        panels = list(dict.fromkeys(v.set_index("run").loc[order, "panel"]))
        color = alt.Color("value:Q", scale=alt.Scale(scheme="viridis"), title="value")
        base = alt.Chart().encode(x=alt.X("pc1:Q", title="PC1"), y=alt.Y("pc2:Q", title="PC2"))
        bars_x = alt.Chart().mark_rule(opacity=0.25).encode(
            x="lo1:Q", x2="hi1:Q", y="pc2:Q", color=color)
        bars_y = alt.Chart().mark_rule(opacity=0.25).encode(
            y="lo2:Q", y2="hi2:Q", x="pc1:Q", color=color)
        path = base.mark_line(color="#999", strokeWidth=0.8).encode(order="value:Q")
        dots = base.mark_point(filled=True, size=70).encode(
            color=color,
            shape=alt.Shape("held:N", title=None,
                            scale=alt.Scale(domain=["trained", "held out"],
                                            range=["circle", "diamond"])),
            tooltip=["run:N", "value:Q", "held:N", alt.Tooltip("pc1:Q", format=".2f"),
                     alt.Tooltip("pc2:Q", format=".2f"), alt.Tooltip("sd1:Q", format=".2f"),
                     alt.Tooltip("sd2:Q", format=".2f"), "n:Q"])
        ring = base.transform_filter("datum.held_out").mark_point(
            size=260, color="crimson", strokeWidth=1.5)
        v = v.assign(shown=_labelled(v))
        labels = base.mark_text(dx=9, dy=-7, fontSize=10).encode(text="shown:N")
        columns = facet_columns(len(panels))
        chart = alt.layer(bars_x, bars_y, path, dots, ring, labels, data=v).properties(
            width=panel_width(columns), height=300).facet(
            facet=alt.Facet("panel:N", sort=panels, title=None),
            columns=columns).resolve_scale(
            x="independent", y="independent")
        figs.append(Figure(
            key=slug("compare-geometry", variable),
            title=f"{variable}: values in each run's aligned subspace",
            caption=("The variable's values laid out on the top two principal components of "
                     "each run's k-dimensional DAS projection (mean per value, bars one "
                     "standard deviation, the grey path joins consecutive values): a line, a "
                     "curve or a ring. Values held out of training (circled in red) show "
                     "whether they fall in place among the trained ones."
                     + k_note(v, per_run=True) + sites_note(v) + (NOT_LEARNT_NOTE if any_not_learnt(runs) else "")),
            chart=chart))
    return figs


LABELS = 8  # value labels a panel at most: more overlap on a curve of twenty counts


def _labelled(v: pd.DataFrame) -> list[str]:
    """The text beside each value's point: the first and last values, the held-out ones and
    every n-th value between, so at most about LABELS a panel are written (the colour and the
    tooltip give every value); '' for the others."""
    out = []
    for (panel, value, held) in zip(v["panel"], v["value"], v["held_out"]):
        values = sorted(v.loc[v["panel"] == panel, "value"].unique())
        step = max(1, -(-len(values) // LABELS))
        i = values.index(value)
        keep = held or i == 0 or i == len(values) - 1 or i % step == 0
        out.append(f"{value:g}" if keep else "")
    return out
