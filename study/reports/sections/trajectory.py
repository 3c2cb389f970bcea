"""Section: training trajectories per stratum, with the detected phase boundaries marked, on a
log step axis as wide as the page (sections/_common.py: `step_axis`, `panel_width`)."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.reports.figure import Figure, slug
from study.claims.curves import accuracy_curves, eval_split, split_curves
from study.claims.phases import detect, learned_from
from study.reports.sections import section
from study.reports.sections._common import TALL, facet_columns, panel_width, step_axis

LEARNED = 0.9  # a stratum counts as learned from the evaluation where it reaches and stays here


def phase_rows(run, curves: pd.DataFrame) -> dict:
    """The plateaus of the overall accuracy (their mean levels), the steps between them, and
    the accuracy at the last evaluation: a curve still rising at the end has a last plateau
    (a mean) below where it finished."""
    overall = curves[curves["stratum"] == "all"].sort_values("step", kind="stable")
    ph = detect(overall["step"], overall["accuracy"])
    final = float(overall["accuracy"].iloc[-1]) if len(overall) else float("nan")
    return {"run": run.label, "split": eval_split(run),
            "plateaus (mean level)": " → ".join(f"{v:.3f}" for v in ph.levels) or "—",
            "boundaries (step)": ", ".join(str(b) for b in ph.boundaries) or "none",
            "final accuracy": "—" if pd.isna(final) else f"{final:.3f}",
            "_bounds": ph.boundaries}


MAX_LINES = 6  # value lines a panel at most: more are pooled into ranges of consecutive values


def pooled(data: pd.DataFrame, values: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """A family with more than MAX_LINES values (counting's twenty counts) drawn as
    MAX_LINES ranges of consecutive values ("1–4"), each the mean accuracy of its values at
    every evaluation: twenty near-identical lines cannot be told apart. (data, the value
    labels in order); unchanged with few values."""
    if len(values) <= MAX_LINES:
        return data, values
    size = -(-len(values) // MAX_LINES)
    groups = [values[i:i + size] for i in range(0, len(values), size)]
    name = {v: (g[0] if len(g) == 1 else f"{g[0]}–{g[-1]}") for g in groups for v in g}
    keep = data["value"] == "all"
    pooled_rows = (data[~keep].assign(value=data.loc[~keep, "value"].map(name))
                   .groupby(["run", "step", "value"], as_index=False)["accuracy"].mean()
                   .assign(stratum=lambda d: d["value"]))
    out = pd.concat([data[keep], pooled_rows], ignore_index=True)
    return out, list(dict.fromkeys(name[v] for v in values))


def _value_sort_key(v: str):
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


@section("trajectory", "Training trajectories", order=10)
def build(runs) -> list[Figure]:
    curves = {r.label: accuracy_curves(r) for r in runs}
    runs = [r for r in runs if not curves[r.label].empty]
    if not runs:
        return []
    phases = [phase_rows(r, curves[r.label]) for r in runs]
    rules = pd.DataFrame([{"run": p["run"], "step": b} for p in phases for b in p["_bounds"]],
                         columns=["run", "step"])
    families = []
    for r in runs:
        for f in curves[r.label]["family"].unique():
            if f != "all" and f not in families:
                families.append(f)
    figs = []
    labels = [r.label for r in runs]
    columns = facet_columns(len(runs))
    size = dict(width=panel_width(columns), height=TALL)
    last = max((int(c["step"].max()) for c in curves.values() if len(c)), default=1)
    for family in families or ["all"]:
        rows = []
        for r in runs:
            c = curves[r.label]
            c = c[(c["family"] == family) | (c["stratum"] == "all")].assign(run=r.label)
            c.loc[c["stratum"] == "all", "value"] = "all"
            rows.append(c)
        data = pd.concat(rows, ignore_index=True)
        values = sorted((v for v in data["value"].unique() if v != "all"), key=_value_sort_key)
        if family != "all" and len(values) < 2:  # one value: the same curve as overall
            continue
        many = len(values) > MAX_LINES
        data, values = pooled(data, values)
        domain = ["all", *values]
        # The boundaries travel in the facet's own data (flagged rows): a layer with data of
        # its own is not split by the facet, so every panel would show every run's boundaries.
        data = data.assign(boundary=False)
        if not rules.empty:
            data = pd.concat([data, rules.assign(boundary=True)], ignore_index=True)
        x = step_axis("step", [last])
        lines = alt.Chart().transform_filter("!datum.boundary").mark_line(
            strokeWidth=1.2, clip=True).encode(
            x=x,
            y=alt.Y("accuracy:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("value:N", title=family, sort=domain,
                            scale=alt.Scale(domain=domain, scheme="viridis")),
            size=alt.condition(alt.datum.value == "all", alt.value(3), alt.value(1.2)),
            tooltip=["run:N", "stratum:N", "step:Q", alt.Tooltip("accuracy:Q", format=".3f")],
        )
        layers = [lines]
        if not rules.empty:
            layers.append(alt.Chart().transform_filter("datum.boundary").mark_rule(
                color="crimson", strokeDash=[4, 3]).encode(
                x=x, tooltip=[alt.Tooltip("step:Q", title="phase boundary")]))
        chart = alt.layer(*layers, data=data).properties(**size).facet(
            facet=alt.Facet("run:N", title=None, sort=labels), columns=columns,
        ).resolve_scale(x="independent")
        split = phases[0]["split"]
        figs.append(Figure(
            key=slug("trajectory", family), title=f"Accuracy during training by {family}",
            caption=(f"{split.capitalize()} accuracy per {family} (thick line: overall) on a "
                     f"log step axis, so the early transitions get room; dashed red rules mark "
                     f"the detected phase boundaries — look for plateaus and for which strata "
                     f"are learned first."
                     + (f" The {family} values are pooled into {len(values)} ranges of "
                        f"consecutive values (each line the mean accuracy of its values); the "
                        f"table below gives each value's own learning step." if many else "")),
            chart=chart))
    by_split = pd.concat([split_curves(r).assign(run=r.label) for r in runs], ignore_index=True)
    if by_split["split"].nunique() > 2:  # more than val and test: held-out sets, pools
        splits = list(dict.fromkeys(by_split["split"]))
        chart = alt.Chart(by_split).mark_line(strokeWidth=1.5).encode(
            x=step_axis("step", [last]),
            y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("split:N", sort=splits, scale=alt.Scale(scheme="category10")),
            tooltip=["run:N", "split:N", "step:Q", alt.Tooltip("accuracy:Q", format=".3f")],
        ).properties(**size).facet(
            facet=alt.Facet("run:N", title=None, sort=labels), columns=columns,
        ).resolve_scale(x="independent")
        figs.append(Figure(
            key="trajectory-splits", title="Accuracy during training on every evaluation set",
            caption=("Overall accuracy on each scored split (held-out counts, evaluation "
                     "pools): the order in which the lines rise is the order in which the "
                     "network learns those parts of the task."),
            chart=chart))
    table = pd.DataFrame([{k: v for k, v in p.items() if not k.startswith("_")} for p in phases])
    learned = _learned_steps(runs, curves)
    figs.append(Figure(
        key="phases", title="Training phases",
        caption=("Plateaus of overall accuracy (each its mean level) and the steps where one "
                 "gives way to the next: several plateaus mean the network learned in phases. "
                 "The last column is the accuracy at the last evaluation: above the last "
                 "plateau where the network was still improving when training ended."),
        table=table))
    figs.append(Figure(key="learned-steps",
                       title=f"Step from which accuracy stays at {LEARNED:.0%} or more, by stratum",
                       caption="Read down a column: strata learned early are the ones the "
                               f"network gets before the rest. A stratum counts as learned from "
                               f"the evaluation after which it never falls below {LEARNED:.0%} "
                               "again (a one-off spike does not count); one never learned shows "
                               "the best accuracy it reached.", table=learned))
    return figs


def _learned_steps(runs, curves) -> pd.DataFrame:
    rows = {}
    for r in runs:
        c = curves[r.label]
        for stratum, g in c.groupby("stratum", sort=False):
            step = learned_from(g["step"], g["accuracy"], LEARNED)
            rows.setdefault(stratum, {})[r.label] = (
                str(step) if step is not None else f"never (best {g['accuracy'].max():.2f})")
    strata = sorted(rows, key=lambda s: (s != "all", s.partition("=")[0],
                                         _value_sort_key(s.partition("=")[2])))
    return pd.DataFrame([{"stratum": s, **{r.label: rows[s].get(r.label, "—") for r in runs}}
                         for s in strata])
