"""Section: a run's evaluation splits along training beside a published run's, the step
each split crosses 50 % and 95 % in each, and, where the task names the splits of its
transition (`Task.transition_splits`; assign_add: the routing of the variable pools), the
step of that transition in each run as a distribution beside the published run's.

The published curves are written into the run directory by the run where its task has them
(`reference.parquet`: source, step, split, accuracy; assign_add: Exoo et al.'s released
checkpoints scored on the nine pools); the run's own come from `metrics.parquet`."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import HEIGHT, facet_columns, panel_width, step_axis
from study.claims.curves import split_curves

LEVELS = (0.5, 0.95)  # the transition table's accuracy levels


def curves(runs) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(rows of curve, kind, split, step, accuracy; the curves in order, published first;
    the splits in the published table's order) over the splits the published run has."""
    with_ref = [r for r in runs if r.reference is not None and not r.reference.empty]
    if not with_ref:
        return pd.DataFrame(columns=["curve", "kind", "split", "step", "accuracy"]), [], []
    parts, order = [], []
    for source, ref in with_ref[0].reference.groupby("source", sort=False):
        parts.append(pd.DataFrame({"curve": source, "kind": "published", "split": ref["split"],
                                   "step": ref["step"].astype(int),
                                   "accuracy": ref["accuracy"].astype(float)}))
        order.append(source)
    splits = list(dict.fromkeys(with_ref[0].reference["split"]))
    for r in with_ref:
        own = split_curves(r)
        own = own[own["split"].isin(splits)]
        if own.empty:
            continue
        parts.append(own.assign(curve=r.label, kind="this study"))
        order.append(r.label)
    data = pd.concat(parts, ignore_index=True)[["curve", "kind", "split", "step", "accuracy"]]
    return data, order, splits


def first_steps(data: pd.DataFrame, order: list[str], splits: list[str]) -> pd.DataFrame:
    """split, then per curve and level the first evaluated step at or above it ("—": never;
    the curve's evaluation spacing bounds the step's precision, named in the header)."""
    rows = []
    for split in splits:
        row = {"split": split}
        for curve in order:
            g = data[(data["curve"] == curve) & (data["split"] == split)].sort_values("step")
            for level in LEVELS:
                hit = g[g["accuracy"] >= level]
                row[_header(data, curve, level)] = f"{int(hit['step'].iloc[0]):,}" if len(hit) else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def _header(data: pd.DataFrame, curve: str, level: float) -> str:
    steps = data.loc[data["curve"] == curve, "step"].drop_duplicates().sort_values()
    spacing = int(steps.diff().median()) if len(steps) > 2 else 0
    every = f", every {spacing:,}" if spacing else ""
    return f"{curve}{every}: ≥ {level:.0%}"


def transition_splits(runs) -> tuple[str, ...]:
    """The splits whose joint rise marks the runs' task's transition (asked of the task)."""
    from study.core import registry
    try:
        return tuple(registry.get("task", runs[0].task).obj.transition_splits)
    except Exception:  # noqa: BLE001 - a run of a task no longer registered: no transition
        return ()


def transition_steps(data: pd.DataFrame, order: list[str], splits, level: float = 0.95
                     ) -> pd.DataFrame:
    """curve, kind, step (the first evaluation with every one of `splits` >= `level`; NaN:
    none), last (its last evaluated step)."""
    rows = []
    for curve in order:
        g = data[(data["curve"] == curve) & (data["split"].isin(splits))]
        wide = g.pivot_table(index="step", columns="split", values="accuracy").sort_index()
        wide = wide.reindex(columns=list(splits))
        hit = wide.index[(wide >= level).all(axis=1)] if len(wide) else []
        rows.append({"curve": curve, "kind": g["kind"].iloc[0] if len(g) else "",
                     "step": float(hit[0]) if len(hit) else float("nan"),
                     "last": int(wide.index.max()) if len(wide) else 0})
    return pd.DataFrame(rows, columns=["curve", "kind", "step", "last"])


def _transition_figures(data, order, splits) -> list[Figure]:
    steps = transition_steps(data, order, splits)
    ours = steps[steps["kind"] == "this study"]
    if len(ours) < 2 or steps["kind"].eq("published").sum() == 0:
        return []
    published = steps[steps["kind"] == "published"]
    routed = ours.dropna(subset=["step"])
    never = ours[ours["step"].isna()]
    points = pd.concat([routed.assign(shown=routed["step"]),
                        never.assign(shown=never["last"].astype(float))], ignore_index=True)
    points["routed"] = points["step"].notna().map({True: "crossed", False: "not by its last step"})
    chart = alt.layer(
        alt.Chart(points).mark_tick(thickness=2, size=28).encode(
            x=alt.X("shown:Q", title="first evaluation with every split ≥ 0.95 (training step)"),
            color=alt.Color("routed:N", title=None),
            tooltip=["curve:N", alt.Tooltip("shown:Q", title="step", format=",.0f"), "routed:N"]),
        alt.Chart(published.assign(shown=published["step"])).mark_rule(
            strokeDash=[5, 3], color="black").encode(
            x="shown:Q", tooltip=["curve:N", alt.Tooltip("shown:Q", title="step", format=",.0f")]),
    ).properties(width=panel_width(1), height=70)
    table = pd.DataFrame({
        "run": list(ours["curve"]) + ["this study: median (range)"] + list(published["curve"]),
        "step": [f"{int(x):,}" if x == x else f"not by {int(last):,}"
                 for x, last in zip(ours["step"], ours["last"])]
        + [(f"{routed['step'].median():,.0f} ({routed['step'].min():,.0f}–"
            f"{routed['step'].max():,.0f}); {len(routed)} of {len(ours)} crossed")
           if len(routed) else f"none of {len(ours)} crossed"]
        + [f"{int(x):,}" if x == x else "—" for x in published["step"]]})
    names = ", ".join(splits)
    return [Figure(
        key="published-transition", title="When each run crosses, beside the published run",
        caption=(f"The first evaluation at which every one of {names} is at or above 0.95, one "
                 f"tick per run (a run that never did is drawn at its last step); the dashed "
                 f"line is the published run's. A step is only as precise as the evaluation "
                 f"spacing."),
        chart=chart, table=table)]


@section("published", "Beside the published run", order=11)
def build(runs) -> list[Figure]:
    data, order, splits = curves(runs)
    if len(order) < 2:  # no run of this study has a published counterpart to draw
        return []
    columns = facet_columns(len(splits), most=3)
    last = int(data["step"].max())
    dashes = [[5, 3] if k == "published" else [1, 0]
              for k in data.drop_duplicates("curve").set_index("curve").loc[order, "kind"]]
    chart = alt.Chart(data).mark_line(strokeWidth=1.5, clip=True).encode(
        x=step_axis("step", [last]),
        y=alt.Y("accuracy:Q", scale=alt.Scale(domain=[0, 1])),
        # one legend: colour and dash share the field, title and order, so they merge
        color=alt.Color("curve:N", title="run", sort=order,
                        scale=alt.Scale(domain=order, scheme="tableau10")),
        strokeDash=alt.StrokeDash("curve:N", title="run", sort=order,
                                  scale=alt.Scale(domain=order, range=dashes)),
        tooltip=["curve:N", "split:N", "step:Q", alt.Tooltip("accuracy:Q", format=".3f")],
    ).properties(width=panel_width(columns), height=HEIGHT).facet(
        facet=alt.Facet("split:N", title=None, sort=splits), columns=columns)
    published = ", ".join(data.loc[data["kind"] == "published", "curve"].unique())
    return [
        Figure(key="published-curves", title="Each evaluation set along training, beside the "
                                             "published run",
               caption=(f"Accuracy on each evaluation set the published run was scored on "
                        f"({published}, dashed) and this study's runs (solid), on a log step "
                        f"axis. The published curve comes from its released checkpoints scored "
                        f"with this toolkit's own evaluation; it was trained at the paper's "
                        f"settings, so a run at another scale differs by design."),
               chart=chart),
        Figure(key="published-steps", title="First step at 50 % and at 95 %, per evaluation set",
               caption=("The first evaluated step at or above each level: where a run's "
                        "transitions come earlier or later than the published run's. A step is "
                        "only as precise as the curve's evaluation spacing (in the header)."),
               table=first_steps(data, order, splits)),
        *_transition_figures(data, order, transition_splits(runs)),
    ]
