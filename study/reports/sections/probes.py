"""Section: linear probes — how linearly decodable each causal variable is at each site,
against the shuffled-label control."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.sites import site_label
from study.core.tables import PROBES
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import HEIGHT, run_color, stacked, variable_panels


KINDS = ["probe", "control (shuffled labels)"]


def by_site(runs) -> pd.DataFrame | None:
    """Per run, variable, site and control: test accuracy of the pooled probe (position -1),
    or the best position's where no pooled probe was fitted."""
    p = stacked(runs, PROBES.name)
    if p is None:
        return None
    p = p[p["split"] == "test"]
    p = p.assign(site_layer=[site_label(s, l) for s, l in zip(p["site"], p["layer"])],
                 probe=p["control"].map({True: KINDS[1], False: KINDS[0]}))
    keys = ["run", "model", "variable", "site_layer", "layer", "probe"]
    pooled = p[p["position"] == -1].groupby(keys, as_index=False)["accuracy"].max()
    best = p[p["position"] >= 0].groupby(keys, as_index=False)["accuracy"].max()
    merged = best.merge(pooled, on=keys, how="outer", suffixes=("_best", "_pooled"))
    merged["accuracy"] = merged["accuracy_pooled"].fillna(merged["accuracy_best"])
    return merged[keys + ["accuracy"]]


def by_position(runs, sites: pd.DataFrame) -> pd.DataFrame | None:
    """Test accuracy per position at each (run, variable)'s best site (probe, not control)."""
    p = stacked(runs, PROBES.name)
    if p is None:
        return None
    p = p[(p["split"] == "test") & (~p["control"]) & (p["position"] >= 0)]
    p = p.assign(site_layer=[site_label(s, l) for s, l in zip(p["site"], p["layer"])])
    real = sites[sites["probe"] == "probe"]
    best = real.loc[real.groupby(["run", "variable"])["accuracy"].idxmax(),
                    ["run", "variable", "site_layer"]]
    out = p.merge(best, on=["run", "variable", "site_layer"])
    return out[["run", "model", "variable", "site_layer", "position", "accuracy"]] if len(out) else None


@section("probes", "Linear probes", order=50)
def build(runs) -> list[Figure]:
    sites = by_site(runs)
    if sites is None or sites.empty:
        return []
    order = sorted(sites["site_layer"].unique(), key=lambda s: (s == "state", s))
    variables = list(dict.fromkeys(sites["variable"]))
    columns, width = variable_panels(len(variables))  # two panels a row
    chart = alt.Chart(sites).mark_line(point=True).encode(
        x=alt.X("site_layer:N", sort=order, title="site"),
        y=alt.Y("accuracy:Q", title="probe accuracy (test)", scale=alt.Scale(domain=[0, 1])),
        color=run_color(runs),
        strokeDash=alt.StrokeDash("probe:N", title=None, scale=alt.Scale(
            domain=KINDS, range=[[1, 0], [4, 3]]), legend=alt.Legend(symbolType="stroke")),
        shape=alt.Shape("probe:N", title=None, scale=alt.Scale(domain=KINDS,
                                                               range=["circle", "cross"])),
        detail="run:N",
        tooltip=["run:N", "variable:N", "site_layer:N", "probe:N",
                 alt.Tooltip("accuracy:Q", format=".3f")],
    ).properties(width=width, height=HEIGHT).facet(
        facet=alt.Facet("variable:N", title=None, sort=variables),
        columns=columns)
    figs = [Figure(
        key="probes-by-site", title="Probe accuracy by site",
        caption=("Logistic-regression probes for each causal variable (solid) against the same "
                 "probe on shuffled labels (dashed): only the gap above the control is "
                 "information the representation holds."),
        chart=chart)]
    pos = by_position(runs, sites)
    if pos is not None:
        chart = alt.Chart(pos).mark_line(point=alt.OverlayMarkDef(size=12)).encode(
            x=alt.X("position:Q", title="position (time step)"),
            y=alt.Y("accuracy:Q", title="probe accuracy (test)", scale=alt.Scale(domain=[0, 1])),
            color=run_color(runs),
            detail="run:N",
            tooltip=["run:N", "variable:N", "site_layer:N", "position:Q",
                     alt.Tooltip("accuracy:Q", format=".3f")],
        ).properties(width=width, height=HEIGHT).facet(
            facet=alt.Facet("variable:N", title=None, sort=variables),
            columns=columns)
        figs.append(Figure(
            key="probes-by-position", title="Probe accuracy along the sequence",
            caption=("At each model's best site, probe accuracy per position: where it rises "
                     "is where the variable becomes readable."),
            chart=chart))
    return figs
