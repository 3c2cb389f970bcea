"""Section: one causal variable across architectures — basis-free similarity of the runs'
aligned subspaces (linear CKA, Kornblith et al. 2019; orthogonal Procrustes), each against
its shuffled-inputs baseline, the other run's random-rotation subspace and the two
network-free codes (input window, answer); a table by architecture pair with intervals over
runs. Anchor: `<task>-compare-similarity-<variable>`."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.core.tables import COMPARE_SIMILARITY
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.claims.cross import at_matched_k, cross_table
from study.claims.learnt import NOT_LEARNT_NOTE, any_not_learnt, learnt_pairs
from study.reports.sections._compare import k_note, run_order, sites_note
from study.reports.sections._heatmap import heatmap, matrix_size
from study.claims.intervals import LEVEL, by_architecture, interval_text

# the other run's side of each matrix: its aligned subspace, with shuffled inputs, its random
# rotation, and the one-hot input-window and answer codes compared with its subspace
KINDS = {"value": "aligned subspaces", "baseline": "inputs shuffled",
         "random_subspace": "random subspace", "input_code": "input code",
         "output_code": "answer code"}


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
    wide = at_matched_k(cross_table(runs, COMPARE_SIMILARITY.name))
    figs = []
    for variable in dict.fromkeys(s["variable"]):
        v = s[s["variable"] == variable]
        table = by_pair(wide[wide["variable"] == variable])
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
            key=slug("compare-similarity", variable),
            title=f"{variable}: aligned subspaces compared",
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
                     "computation." + INTERVAL_NOTE.format(level=LEVEL) + k_note(v)
                     + sites_note(v) + (NOT_LEARNT_NOTE if any_not_learnt(runs) else "")),
            chart=chart, table=table))
    return figs


INTERVAL_NOTE = (" The table gives each pair of architectures, over the pairs of runs that "
                 "both learnt the task: the mean and a {level:.0%} interval from resampling "
                 "runs (each run counted once; none where too few runs let a draw differ).")


def by_pair(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per measure and ordered architecture pair: the similarity, its baselines and the two
    codes' similarity with the receiving runs, each a mean [interval over runs]."""
    df = learnt_pairs(df)
    cols = {c: name for c, name in KINDS.items() if c in df.columns}
    if df.empty:
        return None
    rows = []
    for measure, g in df.groupby("measure", sort=False):
        for r in by_architecture(g, list(cols)).to_dict("records"):
            rows.append({"measure": measure, "A": r["model"], "B": r["other_model"],
                         "runs": f"{r['n_runs']} × {r['n_other_runs']}",
                         **{name: interval_text(r, c) for c, name in cols.items()}})
    return pd.DataFrame(rows)
