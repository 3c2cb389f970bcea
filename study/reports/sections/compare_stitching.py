"""Section: cross-model interchange — a variable's value carried from run A into run B
through a linear map between their aligned subspaces, scored as IIA on B's tested pairs (B
gives the base label on the base and not the counterfactual one), with B's own interchange,
the two network-free codes (a one-hot of the input window and of the answer, written into B
through the same kind of map), the chance level and the random-rotation subspaces beside
it. What each architecture pair's result is (computation, partial computation, input copy,
output code, not shared, not captured), from intervals over runs, is the section "What the
architectures share" (`atlas.py`). Anchor: `<task>-compare-stitching-<variable>`."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.tables import COMPARE_STITCHING
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.claims.cross import at_matched_k, cross_table, with_receiver_control
from study.claims.learnt import NOT_LEARNT_NOTE, any_not_learnt, learnt_pairs
from study.reports.sections._compare import k_note, run_order, sites_note
from study.reports.sections._heatmap import heatmap, matrix_size
from study.claims.shared import pair_verdicts

COLUMNS = {"iia": "stitched A → B", "own_iia": "B's own interchange",
           "input_code_iia": "input code → B", "output_code_iia": "answer code → B",
           "chance_iia": "chance (B, other pairs' sources)",
           "random_subspace_iia": "random subspaces"}


@section("compare_stitching", "Same variable across architectures: stitching", order=46)
def build(runs) -> list:
    df = cross_table(runs, COMPARE_STITCHING.name)
    if df is None or df.empty:
        return []
    df = pair_verdicts(with_receiver_control(df, runs))
    figs = []
    for variable in dict.fromkeys(df["variable"]):
        every_k = df[df["variable"] == variable]
        v = at_matched_k(every_k)
        order = run_order(runs, list(v["run"]) + list(v["other_run"]))
        shown = {c: name for c, name in COLUMNS.items() if c in v.columns}
        long = v[["run", "other_run", "k", *shown]].melt(
            id_vars=["run", "other_run", "k"], value_vars=list(shown), var_name="score",
            value_name="rate")
        long = long.assign(score=long["score"].map(shown))
        n = len(order)
        chart = heatmap(
            long, alt.X("other_run:N", sort=order, title="into B", axis=alt.Axis(labelAngle=-40)),
            alt.Y("run:N", sort=order, title="from A"), "rate", title="IIA (tested pairs)",
            scheme="greens", labels=10, white_above=0.6,
            tooltip=["run:N", "other_run:N", "score:N", "k:Q",
                     alt.Tooltip("rate:Q", format=".3f")],
            **matrix_size(n, panels=min(2, len(shown)))).facet(
            facet=alt.Facet("score:N", title=None, sort=list(shown.values())),
            columns=2)  # two matrices a row: four side by side outgrow a page
        table, by_pair = _table(v)
        figs.append(Figure(
            key=slug("compare-stitching", variable),
            title=f"{variable}: carried from one architecture into another",
            caption=("A least-squares map from A's aligned subspace to B's, fitted on the same "
                     "inputs, carries the variable's value from a source input in A into B's "
                     "subspace on a base input; IIA counts only the pairs that test the "
                     "write in B (B answers the base with the base label and not the "
                     "counterfactual one). Beside it, two codes no network computed, fitted "
                     "into B the same way: a one-hot of the input window (the token the site "
                     "has just read, and the one before) and a one-hot of the answer; and "
                     "the chance level, B's own subspace written with other pairs' sources. "
                     "Stitching near B's own interchange says the two networks' codes are "
                     "linearly interchangeable; it says the architectures share a computation only "
                     "where it also clears both network-free codes (the verdict column)."
                     + (BY_ARCHITECTURE if by_pair else "") + k_note(v) + sites_note(v)
                     + (NOT_LEARNT_NOTE if any_not_learnt(runs) else "")),
            chart=chart, table=table))
    return figs


# more runs than this: the table gives architecture pairs, not every pair of runs
MAX_RUNS_LISTED = 6
BY_ARCHITECTURE = (" The table gives each pair of architectures: the mean over its pairs of "
                   "runs (a run with itself left out, and a run that has not learnt the task "
                   "left out of the means) and the range of the stitched IIA; the matrices "
                   "give every pair of runs.")
# the means beside the stitched IIA in a row of the table by architecture pair
BESIDE = {"B own IIA": "own_iia", "input code": "input_code_iia",
          "answer code": "output_code_iia", "chance": "chance_iia",
          "shuffled map": "shuffled_map_iia", "random subspaces": "random_subspace_iia",
          "map R²": "fit_r2"}
NAMES = {"run": "A", "other_run": "B", "role": "A's role", "other_role": "B's role",
         "iia": "stitched IIA", "own_iia": "B own IIA",
         "input_code_iia": "input code", "output_code_iia": "answer code",
         "chance_iia": "chance", "shuffled_map_iia": "shuffled map",
         "random_subspace_iia": "random subspaces", "fit_r2": "map R²",
         "n_changed": "changed pairs", "n_tested": "tested pairs"}


def _table(v):
    """(the table under the matrices, whether it is by architecture pair). By architecture
    pair, the means are over the pairs of runs that both learnt the task (`run_learnt`,
    `other_run_learnt`; every run where those columns are absent) [ours: a network without
    the variable says nothing about how another architecture carries it]."""
    if v["run"].nunique() <= MAX_RUNS_LISTED:
        shown = ["run", "other_run", "k", "iia", "own_iia", "input_code_iia", "output_code_iia",
                 "chance_iia", "verdict", "shuffled_map_iia", "random_subspace_iia", "fit_r2",
                 "n_changed", "n_tested"]
        if "role" in v and (v["role"].fillna("") != "").any():  # compare.site=atlas
            shown[2:2] = ["role", "other_role"]
        return v[[c for c in shown if c in v]].rename(columns=NAMES), False
    rows = []
    pairs = v[v["run"] != v["other_run"]]
    both = pd.Series(pairs.index.isin(learnt_pairs(pairs).index), index=pairs.index)
    for (a, b), g in pairs.groupby(["model", "other_model"], sort=False):
        ok = g[both[g.index]]
        row = {"A": a, "B": b, "run pairs": len(ok)}
        if not both.all():
            row["left out (not learnt)"] = len(g) - len(ok)
        row["stitched IIA"] = _mean(ok, "iia")
        row["range"] = (f"{ok['iia'].min():.2f}–{ok['iia'].max():.2f}" if len(ok)
                        else "no pair of runs that both learnt")
        row.update({name: _mean(ok, col) for name, col in BESIDE.items() if col in ok})
        row["tested pairs"] = int(round(ok["n_tested"].mean())) if len(ok) else None
        rows.append(row)
    return pd.DataFrame(rows), True


def _mean(g, col):
    return round(float(g[col].mean()), 3) if len(g) else None
