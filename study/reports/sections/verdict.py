"""Section: the verdict — for each architecture, causal variable and trained alignment (OAF,
LAF, and the authors' LAF where it ran), is the variable aligned with a subspace of the
network, judged against the controls? The numbers and the verdicts are the claims' table
`verdicts` (`study.claims.aligned`, rule in `study.claims.rules`); this section draws them.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.claims.aligned import verdict_numbers
from study.claims.learnt import LEARNED_ACC
from study.claims.rules import ALIGNED_IIA, BAR, MARGIN, RULE, _nan
from study.claims.sentences import sentences
from study.core.alignments import label_of, trained
from study.core.tables import COMPARE_GEOMETRY, COMPARE_SIMILARITY, COMPARE_STITCHING
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._common import TALL, facet_columns, model_color, panel_width


def _num(v: float) -> str:
    return "—" if _nan(v) else f"{v:.2f}"


def _cell(row) -> str:
    if row["verdict"] == "too few pairs":
        return "too few tested pairs"
    said = row["verdict"]
    if said == "did not learn":
        said = f"did not learn the task (test {_num(row['acc_test'])} < {LEARNED_ACC}), no verdict"
    return (f"{said}: {_num(row['iia'])} [{_num(row['iia_lo'])}, "
            f"{_num(row['iia_hi'])}] ({row['where']}); random {_num(row['random'])}, "
            f"shuffled {_num(row['shuffled'])}, step 0 {_num(row['step0'])}; input code "
            f"{_num(row.get('confound_input', float('nan')))}, answer code "
            f"{_num(row.get('confound_answer', float('nan')))}; chance "
            f"{_num(row.get('chance', float('nan')))}")


def _seeds_cell(row) -> str:
    if _nan(row["seeds_iia"]):
        return "—"
    return (f"{_num(row['seeds_iia'])} [{_num(row['seeds_lo'])}, {_num(row['seeds_hi'])}] "
            f"over {int(row['n_seeds'])} seeds")


def verdict_table(numbers: pd.DataFrame) -> pd.DataFrame:
    """Rows: runs (architecture and seed) × alignment, and, for an architecture with several
    seeds, one row per alignment (seed "all") with the mean over seeds and its interval;
    columns: the causal variables; cells as text."""
    if numbers.empty:
        return pd.DataFrame()
    variables = list(dict.fromkeys(numbers["variable"]))
    order = {a: i for i, a in enumerate(trained())}
    out = []
    for (run, alignment), g in numbers.groupby(["run", "alignment"], sort=False):
        row = {"model": g["model"].iloc[0], "seed": str(int(g["seed"].iloc[0])),
               "alignment": label_of(alignment), "_a": order.get(alignment, 9)}
        cells = {v: _cell(x) for v, x in zip(g["variable"], g.to_dict("records"))}
        row.update({v: cells.get(v, "—") for v in variables})
        out.append(row)
    several = numbers[numbers["n_seeds"] > 1]
    for (model, alignment), g in several.groupby(["model", "alignment"], sort=False):
        first = g.drop_duplicates("variable")
        cells = {v: _seeds_cell(x) for v, x in zip(first["variable"], first.to_dict("records"))}
        if (g["verdict"] == "did not learn").all():  # no seed learned the task
            cells = {v: f"no seed learned the task: {c}" for v, c in cells.items()}
        out.append({"model": model, "seed": "all", "alignment": label_of(alignment),
                    "_a": order.get(alignment, 9),
                    **{v: cells.get(v, "—") for v in variables}})
    table = pd.DataFrame(out)
    table["_s"] = table["seed"].map(lambda s: (s == "all", int(s) if s.isdigit() else 0))
    return (table.sort_values(["model", "_s", "_a"]).drop(columns=["_a", "_s"])
            .reset_index(drop=True))


# The controls drawn beside each alignment, and their marks (hollow, dark grey: the dots of the
# alignments themselves are filled and coloured by architecture).
CONTROLS = {"random": "random rotation", "shuffled": "shuffled variable",
            "step0": "step-0 network"}
CONTROL_SHAPES = {"random": "cross", "shuffled": "triangle-down", "step0": "diamond"}
ALIGNMENT_SHAPES = ("circle", "square", "triangle-up")


def _chart(numbers: pd.DataFrame, runs) -> alt.FacetChart | None:
    d = numbers.dropna(subset=["iia"])
    if d.empty:
        return None
    d = d.assign(alignment=d["alignment"].map(label_of), control="")
    # each control a row of its own (flagged by `control`), in the facet's data so that each
    # panel gets its own variable's controls
    marks_rows = [d.assign(control=name, control_iia=d[f]).dropna(subset=["control_iia"])
                  for f, name in CONTROLS.items()]
    names = [CONTROLS[f] for f in CONTROLS if d[f].notna().any()]
    d = pd.concat([d, *marks_rows], ignore_index=True)
    x = alt.X("run:N", title=None, sort=sorted(d["run"].unique()))
    offset = alt.XOffset("alignment:N", sort=[label_of(a) for a in trained()])
    y = dict(scale=alt.Scale(domain=[0, 1]))
    tip = ["run:N", "variable:N", "alignment:N", "where:N", alt.Tooltip("iia:Q", format=".3f"),
           alt.Tooltip("iia_lo:Q", format=".3f"), alt.Tooltip("iia_hi:Q", format=".3f"),
           alt.Tooltip("restart_sd:Q", format=".3f", title="sd over restarts"),
           alt.Tooltip("random:Q", format=".3f"), alt.Tooltip("shuffled:Q", format=".3f"),
           alt.Tooltip("step0:Q", format=".3f"), "verdict:N"]
    # one shape scale and one legend for the alignments (filled) and the controls (hollow)
    labels = [label_of(a) for a in trained()]
    marks = alt.Scale(domain=[*labels, *names], range=[
        *(ALIGNMENT_SHAPES[i % len(ALIGNMENT_SHAPES)] for i in range(len(labels))),
        *(CONTROL_SHAPES[f] for f in CONTROLS if CONTROLS[f] in names)])
    title = "alignment / control"
    shape = alt.Shape("alignment:N", scale=marks, title=title)
    own = alt.datum.control == ""
    bars = alt.Chart().transform_filter(own).mark_rule(strokeWidth=2).encode(
        x=x, xOffset=offset, y=alt.Y("iia_lo:Q", title="test IIA on tested pairs", **y),
        y2="iia_hi:Q", color=model_color(runs))  # one legend, merged with the dots
    point = alt.Chart().transform_filter(own).mark_point(filled=True, size=60).encode(
        x=x, xOffset=offset, y=alt.Y("iia:Q", **y), color=model_color(runs), shape=shape,
        tooltip=tip)
    layers = [bars, point]
    if names:  # one hollow mark per control, told apart by shape, named in the legend
        layers.append(alt.Chart().transform_filter(~own).mark_point(
            color="#333", size=55, strokeWidth=1.6, opacity=0.9).encode(
            x=x, xOffset=offset, y=alt.Y("control_iia:Q", **y),
            shape=alt.Shape("control:N", scale=marks, title=title), tooltip=tip))
    n = d["run"].nunique() * d["alignment"].nunique()  # the controls add no column
    columns = facet_columns(d["variable"].nunique())
    if 36 * n > panel_width(columns):  # a readable bar per (run, alignment): a row each
        columns = 1
    width = panel_width(columns)
    return alt.layer(*layers, data=d).properties(
        width=width, height=TALL).facet(facet=alt.Facet("variable:N", title=None),
                                        columns=columns)


_COMPARISONS = ((COMPARE_SIMILARITY.name, "compare-similarity", "similarity across runs"),
                (COMPARE_GEOMETRY.name, "compare-geometry", "geometry of its values"),
                (COMPARE_STITCHING.name, "compare-stitching", "cross-model interchange"))


def _comparison_links(runs, numbers: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """Links to the cross-run figures (the `compare_*` sections) of the verdict's variables,
    where the runs hold those tables."""
    from study.claims.cross import cross_table
    links = []
    for table, prefix, text in _COMPARISONS:
        df = cross_table(runs, table)
        if df is None or "variable" not in df:
            continue
        for variable in dict.fromkeys(numbers["variable"]):
            if (df["variable"] == variable).any():
                links.append((f"{variable}: {text}", slug(prefix, variable)))
    return tuple(links)


def _unscored_and_unlearned(numbers: pd.DataFrame) -> pd.DataFrame:
    """One row per run that did not learn the task and has no scored IIA either (a table of
    its cells would hold only dashes): the run and why there is no verdict."""
    rows = []
    for run, g in numbers.groupby("run", sort=True):
        if (g["verdict"] == "did not learn").all() and g["iia"].isna().all():
            rows.append({"run": run, "verdict": f"none: did not learn the task (test "
                                                f"accuracy {_num(g['acc_test'].iloc[0])} < "
                                                f"{LEARNED_ACC}), no IIA scored"})
    return pd.DataFrame(rows, columns=["run", "verdict"])


@section("verdict", "Verdict: which variables are aligned", order=-10)
def build(runs) -> list[Figure]:
    numbers = verdict_numbers(runs)
    if numbers.empty:
        return []
    unlearned = _unscored_and_unlearned(numbers)
    lines = [Figure(key="verdict-not-learned", title="Runs that did not learn the task",
                    caption=("One line per run below test accuracy "
                             f"{LEARNED_ACC} with no scored IIA: nothing to judge."),
                    table=unlearned)] if len(unlearned) else []
    numbers = numbers[~numbers["run"].isin(unlearned["run"])]
    if numbers.empty:
        return lines
    figs = [Figure(
        key="verdict", title="Verdict per architecture, causal variable and alignment",
        caption=("Above the table: the verdicts in plain words, one line per causal variable "
                 "(each run read at its best alignment). Each cell: the verdict, then the test "
                 "IIA with its 95 % interval and the controls it is judged against, at the "
                 "alignment's site and k. In detail: the test IIA is on the pairs that test the "
                 "intervention, with its 95 % Wilson interval over those pairs (at the "
                 "alignment's k and site with the best training IIA), then its controls' test "
                 "IIA at that site and k: an untrained random rotation; the same alignment "
                 "searched with the variable's values shuffled across pairs (shuffled); and "
                 "searched on the untrained (step-0) network, both climbing the search's k "
                 "ladder with its warm starts and restarts; what a network holding only the "
                 "input window at the site (input code) or only the answer (answer code) "
                 "would score on the same pairs; and the pair set's chance level. "
                 "OAF: orthogonal; LAF: linear, ours (a rotation times the "
                 "authors' symmetric matrix, started at a random rotation); LAF (authors'): "
                 "their linear alignment trained their way. Rows with seed \"all\": the mean "
                 "over seeds with a 95 % t interval. Rule, under the table: " + RULE + "; "
                 f"a run below test accuracy {LEARNED_ACC} did not learn the task and gets no "
                 "verdict (its numbers are shown: where the readout reads the answer, a "
                 "network scores there whether or not it computes the variable)."),
        table=verdict_table(numbers), links=_comparison_links(runs, numbers),
        points=tuple(sentences(numbers))),
        *lines,
        Figure(key="verdict-rule", title="Verdict rule",
               caption="How a cell's verdict follows from its numbers; a variable whose test "
                       "split has too few tested pairs is not scored; without the random or "
                       "the shuffled control a cell reads \"no control\".",
               table=pd.DataFrame({"verdict": ["confounded with the input / the answer",
                                               "aligned", "partial", "not aligned",
                                               "did not learn"],
                                   "when": [f"the input or the answer code scores above "
                                            f"{1 - MARGIN:.1f}: no IIA can clear it, the pairs "
                                            f"cannot tell the variable from it (pairs that "
                                            f"change the variable without changing the answer "
                                            f"the source gives, or another site, can)",
                                            f"lower end ≥ {BAR} + {MARGIN} and "
                                            f"IIA ≥ {ALIGNED_IIA}",
                                            f"lower end ≥ {BAR} + {MARGIN} and "
                                            f"IIA < {ALIGNED_IIA}", "otherwise",
                                            f"the run's test accuracy < {LEARNED_ACC}"]}))]
    chart = _chart(numbers, runs)
    if chart is not None:
        figs.append(Figure(
            key="verdict-iia", title="IIA with its interval against the controls",
            caption=("Filled dot (colour: the architecture, shape: the alignment) and bar: each "
                     "trained alignment's test IIA on tested pairs and its 95 % Wilson interval; "
                     "hollow grey marks in the same column, that alignment's controls (legend "
                     "\"control\": random rotation, shuffled variable, step-0 network). An "
                     f"alignment is aligned where the bar clears every control mark by {MARGIN} "
                     f"and the dot reaches {ALIGNED_IIA}."),
            chart=chart))
    return figs
