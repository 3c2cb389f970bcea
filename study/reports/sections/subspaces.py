"""Section: agreement of a variable's DAS subspaces across one run's checkpoints."""
from __future__ import annotations

import altair as alt
from pathlib import PurePath

from study.core.tables import SUBSPACES
from study.reports.figure import Figure
from study.reports.sections import section
from study.reports.sections._common import HEIGHT, stacked, variable_panels


@section("subspaces", "Subspace agreement across checkpoints", order=70)
def build(runs) -> list[Figure]:
    s = stacked(runs, SUBSPACES.name)
    if s is None or s.empty:
        return []
    s = s.assign(compared_with=[
        (PurePath(o).name if o else "this run") + (f" @{int(c)}" if c >= 0 else "")
        for o, c in zip(s["other_run"].fillna(""), s["other_checkpoint"])])
    variables = list(dict.fromkeys(s["variable"]))
    columns, width = variable_panels(len(variables))  # two panels a row
    chart = alt.Chart(s).mark_line(point=True).encode(
        x=alt.X("k:Q", scale=alt.Scale(type="log", base=2), title="subspace size k"),
        y=alt.Y("mean_cos_angle:Q", title="mean cosine of principal angles",
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("alignment:N"),
        detail="compared_with:N",
        strokeDash=alt.StrokeDash("run:N"),
        tooltip=["run:N", "variable:N", "site:N", "alignment:N", "k:Q", "compared_with:N",
                 alt.Tooltip("mean_cos_angle:Q", format=".3f"),
                 alt.Tooltip("min_cos_angle:Q", format=".3f")],
    ).properties(width=width, height=HEIGHT).facet(
        facet=alt.Facet("variable:N", title=None, sort=variables),
        columns=columns)
    return [Figure(
        key="subspaces", title="Subspace agreement across checkpoints",
        caption=("Mean cosine of the principal angles between a variable's subspaces found at "
                 "different checkpoints of one run (1: the same subspace); read it against the "
                 "random alignment's line, which is what unrelated subspaces give. Runs are "
                 "compared with each other in the basis-free sections."),
        chart=chart)]
