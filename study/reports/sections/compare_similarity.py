"""Section: one causal variable across architectures — basis-free similarity of the runs'
aligned subspaces (linear CKA, Kornblith et al. 2019; orthogonal Procrustes), each against
its shuffled-inputs baseline and the other run's random-rotation subspace. Anchor:
`<task>-compare-similarity-<variable>`."""
from __future__ import annotations

import altair as alt

from study.core.tables import COMPARE_SIMILARITY
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._compare import (NOT_LEARNT_NOTE, any_not_learnt, cross_table,
                                              at_matched_k, k_note, run_order, sites_note)
from study.reports.sections._heatmap import heatmap, matrix_size

KINDS = {"value": "aligned subspaces", "baseline": "inputs shuffled",
         "random_subspace": "random subspace (other run)",
         "input_code": "input code (other run)", "output_code": "answer code (other run)"}


def similarity(runs):
    """Long rows for the matrices: variable, run, other_run, measure, k, compared, value."""
    df = cross_table(runs, COMPARE_SIMILARITY.name)
    if df is None:
        return None
    df = at_matched_k(df)
    kinds = [c for c in KINDS if c in df.columns]  # tables written before the codes had none
    ids = [c for c in ("variable", "run", "other_run", "measure", "k", "matched_k", "site",
                       "other_site") if c in df.columns]
    long = df.melt(id_vars=ids, value_vars=kinds, var_name="compared", value_name="score")
    return long.assign(compared=long["compared"].map(KINDS))


@section("compare_similarity", "Same variable across architectures: subspace similarity",
         order=44)
def build(runs) -> list:
    s = similarity(runs)
    if s is None or s.empty:
        return []
    figs = []
    for variable in dict.fromkeys(s["variable"]):
        v = s[s["variable"] == variable]
        order = run_order(runs, list(v["run"]) + list(v["other_run"]))
        n = len(order)
        size = matrix_size(n, panels=v["compared"].nunique())
        chart = heatmap(
            v, alt.X("other_run:N", sort=order, title="other run", axis=alt.Axis(labelAngle=-40)),
            alt.Y("run:N", sort=order, title="run"), "score", title="similarity",
            scheme="blues", labels=10 if size["width"] >= 26 * n else None, white_above=0.6,
            tooltip=["run:N", "other_run:N", "measure:N", "compared:N", "k:Q", "site:N",
                     "other_site:N", alt.Tooltip("score:Q", format=".3f")],
            **size).facet(
            row=alt.Row("measure:N", title=None),
            column=alt.Column("compared:N", title=None, sort=list(KINDS.values())))
        figs.append(Figure(
            key=slug("compare-similarity", variable), title=f"{variable}: aligned subspaces compared",
            caption=("Each run's activations projected onto its own DAS subspace for the "
                     "variable, on the same inputs at the same positions (the variable's "
                     "counterfactual pairs), compared without shared coordinates: linear CKA "
                     "and orthogonal Procrustes (1 = the same geometry up to rotation and "
                     "scale). A cell is informative where it stands well above the same cell "
                     "with inputs shuffled between the runs and with the other run's "
                     "random-rotation subspace, and above the two codes no network computed "
                     "compared with the other run's subspace: a one-hot of the input window "
                     "(the token the site has just read) and of the answer. Any two linear "
                     "codes of a few-valued variable score high, so a similarity the input or "
                     "answer code reaches as well says the runs share that code, not a "
                     "computation." + k_note(v) + sites_note(v) + (NOT_LEARNT_NOTE if any_not_learnt(runs) else "")),
            chart=chart))
    return figs
