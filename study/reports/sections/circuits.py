"""Section: attention circuits — per-head attention scores, weight-based views, and what the
task loses when each head is ablated; and every head's scores of every attention run side
by side (heads as rows, runs as columns, anchor `<task>-circuit-roles`)."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.tables import ABLATION, CIRCUITS
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import (PLOT_WIDTH, TALL, at_least, facet_columns,
                                            panel_width, stacked, step_axis)
from study.reports.sections._heatmap import heatmap

# the tooltip of the per-head heat maps
HEAD_TOOLTIP = ["run:N", "head_label:N", "score:N", alt.Tooltip("value:Q", format=".3f")]


def head_label(layer: int, head: int) -> str:
    return f"L{int(layer)}" + ("" if int(head) < 0 else f".H{int(head)}")


def scores(runs) -> pd.DataFrame | None:
    """run, head_label, score, value for the scores that are fractions or cosines
    (frequencies such as `fourier_freq_<i>` are left to the table)."""
    c = stacked(runs, CIRCUITS.name)
    if c is None:
        return None
    c = c[~c["score"].str.startswith("fourier_freq_")]
    return c.assign(head_label=[head_label(l, h) for l, h in zip(c["layer"], c["head"])])


def ablation(runs) -> pd.DataFrame | None:
    a = stacked(runs, ABLATION.name)
    if a is None:
        return None
    base = a[a["method"] == "none"][["run", "split", "stratum", "accuracy"]]
    a = a[a["method"] != "none"].merge(base, on=["run", "split", "stratum"],
                                       suffixes=("", "_unablated"))
    return a.assign(head_label=[head_label(l, h) for l, h in zip(a["layer"], a["head"])],
                    drop=a["accuracy_unablated"] - a["accuracy"])


def roles(runs) -> pd.DataFrame | None:
    """run, head_label, score, value: every per-head score and, as `ablation drop: <stratum>`,
    the accuracy each zero-ablated head costs per stratum — one long table over the runs
    (architectures) for the side-by-side chart. Layer-level rows (head -1) are left out."""
    parts = []
    s = scores(runs)
    if s is not None:
        parts.append(s[s["head"] >= 0][["run", "head_label", "score", "value"]])
    a = ablation(runs)
    if a is not None:
        z = a[(a["method"] == "zero") & (a["head"] >= 0)]
        if "split" in z.columns and z["split"].nunique() > 1:
            z = z[z["split"] == ("test" if "test" in set(z["split"]) else z["split"].iloc[0])]
        parts.append(z.assign(score="ablation drop: " + z["stratum"].astype(str), value=z["drop"])
                     [["run", "head_label", "score", "value"]])
    parts = [p for p in parts if not p.empty]
    if not parts:
        return None
    out = pd.concat(parts, ignore_index=True)
    return out.assign(column=out["run"].map({x.label: _with_accuracy(x) for x in runs}))


def _with_accuracy(run) -> str:
    """`rope2 s0 (acc 0.97)`: whether the run learned the task, beside its name."""
    acc = run.summary.get("test_accuracy")
    return run.label if not isinstance(acc, (int, float)) else f"{run.label} (acc {acc:.2f})"


def roles_chart(runs, r: pd.DataFrame):
    """Heads as rows, runs (architectures) as columns, one panel per score."""
    order = [_with_accuracy(x) for x in runs if x.label in set(r["run"])]
    heads = sorted(r["head_label"].unique(), key=lambda h: [int(p[1:]) for p in h.split(".")])
    names = list(dict.fromkeys(r["score"]))
    columns = max(1, min(4, PLOT_WIDTH // (42 * len(order) + 80)))
    return heatmap(
        r, alt.X("column:N", sort=order, title=None, axis=alt.Axis(labelAngle=-40)),
        alt.Y("head_label:N", sort=heads, title="head"), "value", title="score",
        scheme="oranges", clamp=True, labels=8, tooltip=HEAD_TOOLTIP,
        width=at_least(max(60, 42 * len(order)), min(columns, len(names))),
        height=max(60, 16 * len(heads))).facet(
        facet=alt.Facet("score:N", sort=names, title=None),
        # as many panels a row as fit the page beside their head labels
        columns=columns).resolve_scale(
        y="independent")


# Exoo et al.'s progress measures (appendix B), as the circuits table names them, each at the
# layer the paper reads it (their layer 1 is our layer 0)
PROGRESS = {"attn_num_to_prev": 0, "attn_eq_to_operands": 0, "attn_eq_to_values": 1,
            "probe_var_from_num": 0, "qk_num_to_prev_var": 0, "qk_var_identity": 1,
            "ov_mlp_accuracy": 1, "cos_premlp_ov": 1}


def along_training(runs) -> pd.DataFrame | None:
    """run, checkpoint, measure, value: the progress measures of every run whose circuits
    table holds more than one checkpoint (`circuits.trajectory=true`, or `analyze RUN
    analysis=circuits checkpoint=all`), layer-level rows (head -1) at the paper's layer."""
    parts = []
    for r in runs:
        c = r.tables.get(CIRCUITS.name)
        if c is None or c.empty or c["checkpoint"].nunique() < 2:
            continue
        c = c[(c["head"] < 0) & (c["layer"] == c["score"].map(PROGRESS))]
        parts.append(c.assign(run=r.label, measure=c["score"])[["run", "checkpoint", "measure",
                                                                "value"]])
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else None


def along_training_chart(runs, t: pd.DataFrame):
    names = [m for m in PROGRESS if m in set(t["measure"])]
    columns = facet_columns(t["run"].nunique())
    return alt.Chart(t).mark_line(point=True).encode(
        x=step_axis("checkpoint", t["checkpoint"]),
        y=alt.Y("value:Q", title="measure", scale=alt.Scale(domain=[0, 1], clamp=True)),
        color=alt.Color("measure:N", sort=names, title="progress measure"),
        tooltip=["run:N", "measure:N", "checkpoint:Q", alt.Tooltip("value:Q", format=".3f")],
    ).properties(width=panel_width(columns), height=TALL).facet(
        facet=alt.Facet("run:N", title=None, sort=[r.label for r in runs]), columns=columns)


@section("circuits", "Attention circuits", order=60)
def build(runs) -> list[Figure]:
    figs = []
    r = roles(runs)
    if r is not None and not r.empty:
        figs.append(Figure(
            key="circuit-roles", title="Circuit roles side by side",
            caption=("Every head's scores (previous-token, induction, attention to the task's "
                     "targets, weight-based views) and the accuracy its zero-ablation costs per "
                     "stratum, with heads as rows and runs (architectures) as columns: the "
                     "same role found in different transformers shows as the same bright cell "
                     "in each column."),
            chart=roles_chart(runs, r)))
    t = along_training(runs)
    if t is not None:
        figs.append(Figure(
            key="progress-measures", title="Progress measures along training",
            caption=("Exoo et al.'s progress measures at every analysed checkpoint "
                     "(circuits.trajectory=true): attention of '=' to the operands and of "
                     "assigned numbers to their variable (top-k criteria, layer 0), of '=' to "
                     "the operands' values (layer 1), the layer-0 probe of a number's variable, "
                     "and the weight-based QK, OV and MLP measures. Read against the accuracy "
                     "trajectories above: a measure that rises where a pool does is the part "
                     "of the circuit that pool needs."),
            chart=along_training_chart(runs, t)))
    s = scores(runs)
    if s is not None and not s.empty:
        names = list(dict.fromkeys(s["score"]))
        heads = sorted(s["head_label"].unique())
        chart = heatmap(
            s, alt.X("score:N", sort=names, title=None, axis=alt.Axis(labelAngle=-40)),
            alt.Y("head_label:N", sort=heads, title="head (L = all heads of the layer)"),
            "value", title="score", scheme="oranges", clamp=True, labels=8, tooltip=HEAD_TOOLTIP,
            width=at_least(max(200, 34 * len(names))), height=max(60, 18 * len(heads))).facet(
            row=alt.Row("run:N", title=None, sort=[r.label for r in runs]))
        figs.append(Figure(
            key="circuit-scores", title="Attention-head scores",
            caption=("Each head's previous-token, induction and attends-to-target scores (and "
                     "weight-based views where the model has them): a head near 1 on one score "
                     "is a candidate for that role in the circuit."),
            chart=chart))
    a = ablation(runs)
    if a is not None and not a.empty:
        overall = a[a["stratum"] == "all"]
        chart = alt.Chart(overall).mark_bar().encode(
            x=alt.X("head_label:N", title="ablated head"),
            xOffset="method:N",
            y=alt.Y("drop:Q", title="accuracy lost"),
            color=alt.Color("method:N", title="ablation"),
            column=alt.Column("run:N", title=None, sort=[r.label for r in runs]),
            tooltip=["run:N", "split:N", "head_label:N", "method:N",
                     alt.Tooltip("accuracy:Q", format=".3f"),
                     alt.Tooltip("accuracy_unablated:Q", format=".3f"),
                     alt.Tooltip("drop:Q", format=".3f")],
        ).properties(width=at_least(max(120, 30 * overall["head_label"].nunique()),
                                    overall["run"].nunique()), height=150)
        figs.append(Figure(
            key="head-ablation", title="Head ablation",
            caption=("Accuracy lost when a head's output is zeroed or replaced by its mean: "
                     "heads whose removal costs much are necessary for the task."),
            chart=chart))
        strata = a[(a["stratum"] != "all") & (a["method"] == "zero")]
        if not strata.empty:
            chart = heatmap(
                strata, alt.X("stratum:N", title=None, axis=alt.Axis(labelAngle=-50)),
                alt.Y("head_label:N", title="zero-ablated head"), "drop",
                title="accuracy lost", scheme="reds", clamp=True,
                tooltip=["run:N", "stratum:N", "head_label:N",
                         alt.Tooltip("drop:Q", format=".3f")],
                width=at_least(24 * strata["stratum"].nunique()),
                height=max(40, 18 * strata["head_label"].nunique()),
                row=alt.Row("run:N", title=None, sort=[r.label for r in runs]))
            figs.append(Figure(
                key="head-ablation-strata", title="Head ablation by stratum",
                caption=("Accuracy lost per stratum when each head is zeroed: a head that "
                         "matters only for some strata (deep chains, held-out pairs) "
                         "implements the part of the task those strata need."),
                chart=chart))
    return figs
