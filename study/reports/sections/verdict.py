"""Section: the verdict — for each architecture, causal variable and trained alignment (OAF,
LAF, and the authors' LAF where it ran), is the variable aligned with a subspace of the
network, judged against the controls?

Per run, variable and alignment (tables `das`, `das_shuffled`, `das_control`, test split,
IIA on tested pairs: the network itself gives the base label and not the counterfactual
one):
- the candidate: among that alignment's rows at every site and k, the one with the best
  *training-split* IIA (ties: smaller k) [ours: choosing by test IIA would bias the number
  upward]; its test IIA and 95 % Wilson interval over the tested pairs;
- the random-rotation control: the test IIA of the untrained random rotation at the
  candidate's site and k (table `das`);
- the shuffled-variable control, the main trained control: the test IIA of the same
  alignment searched on the trained network with the variable's values shuffled across
  pairs (table `das_shuffled`, `study/analyses/das/controls.py`) [ours: what the search
  reaches where the source no longer carries the labels' value];
- the step-0 control: the test IIA of the same alignment searched on the untrained (step-0)
  network (table `das_control`) [ours]; where a run has no step-0 table the verdict is
  judged against the other two.
The controls climb the search's k ladder with its warm starts and restarts, so each is read
at the candidate's own site and k, where it had the same optimisation as the candidate; a
run whose controls did not run there (an older run, controls at one k) is read at the best
over what ran [ours]. Each alignment is judged against its own controls, so OAF and LAF are
judged alike and compared on the same footing. `chance` is the pair set's chance level at
that site (`study.analyses.common.stats.chance_iia`).

With several seeds of an architecture, each (model, variable, alignment) also gets the mean
test IIA over seeds with a 95 % t interval (`seed_interval`: the larger of the seeds' and the
restarts' spread), beside each run's Wilson interval over pairs (computed by the das
analysis, `study/analyses/common/stats.py`).

Rule (`verdict`) [ours]: aligned when the Wilson interval's lower end clears the highest
control by `MARGIN` and IIA >= `ALIGNED_IIA`; partial when it clears them but IIA is lower;
not aligned otherwise. A variable with too few tested test pairs is "too few pairs"; without
the random or the shuffled control, "no control".

A run whose test accuracy is below `LEARNED_ACC` gets "did not learn" instead of a verdict,
its numbers still shown (a run that did not learn and has no scored IIA gets one line instead
of a row of dashes) [ours]: the question is whether the network computes the task's
variable, and a network that does not do the task can still score high where the readout
reads the answer (binding's 2-layer attention-only transformer, on the shallow rules'
plateau at test 0.55, reaches OAF 0.85-0.93 in its last residual stream at `:`: a subspace
that carries the digit it is about to output, which on a root-value pair is the value).
"""
from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

from study.core.intervals import t_interval
from study.core.alignments import control, label_of, trained
from study.core.sites import site_label
from study.core.tables import (COMPARE_GEOMETRY, COMPARE_SIMILARITY, COMPARE_STITCHING, DAS,
                               DAS_CONTROL, DAS_SHUFFLED)
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._common import PLOT_WIDTH, TALL, WIDTH, chosen_on_train, model_color
# below this test accuracy a run gets "did not learn", not a verdict (as the comparisons mark it)
from study.claims.learnt import LEARNED_ACC, accuracy_on_test, display_label

MARGIN = 0.1  # the lower end of the interval must clear every control by this much
ALIGNED_IIA = 0.9  # and the IIA itself reach this, for "aligned"
BAR = "max(random, shuffled, step 0)"
RULE = (f"aligned: the lower end of the 95 % interval ≥ {BAR} + {MARGIN} and IIA ≥ "
        f"{ALIGNED_IIA}; partial: the lower end ≥ {BAR} + {MARGIN} and IIA < {ALIGNED_IIA}; "
        f"not aligned: otherwise")
COLUMNS = ["run", "model", "seed", "variable", "alignment", "where", "iia", "iia_lo", "iia_hi",
           "restart_sd", "random", "shuffled", "step0", "chance", "too_few", "verdict",
           "n_seeds", "seeds_iia", "seeds_lo", "seeds_hi", "acc_test"]


def seed_interval(values, restart_sd=None, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): Student's t interval at coverage `level` for the mean over seeds of
    `values` ((n_seeds,), one per seed, NaN dropped) [ours]. Where `restart_sd` ((n_seeds,),
    each seed's standard deviation over restarts) is given, the spread used is the larger of
    the seeds' own and the restarts' pooled one (root mean square; a seed's kept value is one
    restart's, so the seeds' spread may understate it). IIA is a share: the interval is
    clipped to [0, 1]. (mean, nan, nan) under two seeds."""
    v = np.asarray(values, dtype=float)
    keep = ~np.isnan(v)
    v = v[keep]
    if v.size < 2:
        return t_interval(v, level)
    sd = float(v.std(ddof=1))
    if restart_sd is not None:
        r = np.asarray(restart_sd, dtype=float)[keep]
        r = r[~np.isnan(r)]
        if r.size:
            sd = max(sd, float(np.sqrt(np.mean(r ** 2))))
    mean, lo, hi = t_interval(v, level, sd)
    return mean, max(0.0, lo), min(1.0, hi)


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def verdict(iia: float, lo: float, random: float, shuffled: float,
            step0: float = float("nan")) -> str:
    """'aligned' | 'partial' | 'not aligned' by the rule above; 'too few pairs' where the IIA
    is not scored, 'no control' where the random or the shuffled control is missing (a
    missing step-0 control leaves the bar to the other two)."""
    if _nan(iia) or _nan(lo):
        return "too few pairs"
    if _nan(random) or _nan(shuffled):
        return "no control"
    bar = max(c for c in (random, shuffled, step0) if not _nan(c))
    if lo >= bar + MARGIN:
        return "aligned" if iia >= ALIGNED_IIA else "partial"
    return "not aligned"


def _test(df: pd.DataFrame | None) -> pd.DataFrame:
    if df is None:
        return pd.DataFrame(columns=["variable", "alignment", "split", "iia"])
    return df[df["split"] == "test"]


def _best(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.max()) if len(v) else float("nan")


def _control(df: pd.DataFrame, variable: str, alignment: str, at=None) -> float:
    """The test IIA of `alignment` for `variable` in a control table at the candidate `at`
    (its site, layer, position and k) where it ran there, else the best over what ran (NaN:
    none)."""
    if not len(df):
        return float("nan")
    d = df[(df["variable"] == variable) & (df["alignment"] == alignment)]
    if at is not None:
        here = d
        for c in ("site", "layer", "position", "k"):
            here = here[here[c] == at[c]]
        if len(here):
            return _best(here["iia"])
    return _best(d["iia"])


def verdict_numbers(runs) -> pd.DataFrame:
    """One row per (run, variable, trained alignment): the candidate's test IIA and interval,
    the three controls, the verdict and, with several seeds of the model, the interval over
    seeds (`COLUMNS`)."""
    rows = []
    for r in runs:
        das = r.final(DAS.name)
        if das is None:
            continue
        shuffled, step0 = _test(r.final(DAS_SHUFFLED.name)), _test(r.final(DAS_CONTROL.name))
        acc = accuracy_on_test(r)
        for variable, d in das.groupby("variable", sort=False):
            test = d[d["split"] == "test"]
            too_few = bool(test["too_few"].any()) if "too_few" in test else False
            for alignment in (a for a in trained() if (d["alignment"] == a).any()):
                cand = chosen_on_train(d[d["alignment"] == alignment])
                iia = lo = hi = sd = chance = float("nan")
                where = ""
                if cand is not None:
                    chance = float(cand.get("chance", np.nan))
                    iia, lo, hi, sd = (float(cand.get(c, np.nan))
                                       for c in ("iia", "iia_lo", "iia_hi", "iia_restart_sd"))
                    where = f"k={int(cand['k'])} {site_label(cand['site'], cand['layer'])}"
                random = _control(test, variable, control(), cand)
                ctl = (_control(shuffled, variable, alignment, cand),
                       _control(step0, variable, alignment, cand))
                rows.append(dict(run=display_label(r), model=r.model, seed=r.seed,
                                 variable=variable,
                                 alignment=alignment, where=where, iia=iia, iia_lo=lo,
                                 iia_hi=hi, restart_sd=sd, random=random, shuffled=ctl[0],
                                 step0=ctl[1], chance=chance, too_few=too_few, acc_test=acc,
                                 verdict=("did not learn" if acc < LEARNED_ACC
                                          else verdict(iia, lo, random, *ctl))))
    out = pd.DataFrame(rows, columns=COLUMNS)
    for _, g in out.groupby(["model", "variable", "alignment"], sort=False):
        n = int(g["iia"].notna().sum())
        mean, lo, hi = seed_interval(g["iia"], g["restart_sd"])
        out.loc[g.index, ["n_seeds", "seeds_iia", "seeds_lo", "seeds_hi"]] = (
            n, mean if n > 1 else np.nan, lo, hi)
    return out


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
            f"shuffled {_num(row['shuffled'])}, step 0 {_num(row['step0'])}; chance "
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


def _chart(numbers: pd.DataFrame, runs) -> alt.FacetChart | None:
    d = numbers.dropna(subset=["iia"])
    if d.empty:
        return None
    d = d.assign(alignment=d["alignment"].map(label_of))
    x = alt.X("run:N", title=None, sort=sorted(d["run"].unique()))
    offset = alt.XOffset("alignment:N", sort=[label_of(a) for a in trained()])
    y = dict(scale=alt.Scale(domain=[0, 1]))
    tip = ["run:N", "variable:N", "alignment:N", "where:N", alt.Tooltip("iia:Q", format=".3f"),
           alt.Tooltip("iia_lo:Q", format=".3f"), alt.Tooltip("iia_hi:Q", format=".3f"),
           alt.Tooltip("restart_sd:Q", format=".3f", title="sd over restarts"),
           alt.Tooltip("random:Q", format=".3f"), alt.Tooltip("shuffled:Q", format=".3f"),
           alt.Tooltip("step0:Q", format=".3f"), "verdict:N"]
    shape = alt.Shape("alignment:N", sort=[label_of(a) for a in trained()], title="alignment")
    bars = alt.Chart().mark_rule(strokeWidth=2).encode(
        x=x, xOffset=offset, y=alt.Y("iia_lo:Q", title="test IIA on tested pairs", **y),
        y2="iia_hi:Q", color=model_color(runs, legend=False))
    point = alt.Chart().mark_point(filled=True, size=60).encode(
        x=x, xOffset=offset, y=alt.Y("iia:Q", **y), color=model_color(runs), shape=shape,
        tooltip=tip)
    layers = [bars, point]
    for field, dash in (("random", [2, 2]), ("shuffled", [1, 0]), ("step0", [6, 3])):
        if d[field].notna().any():
            layers.append(alt.Chart().mark_tick(color="gray", thickness=2, size=10,
                                                strokeDash=dash).encode(
                x=x, xOffset=offset, y=alt.Y(f"{field}:Q", **y), tooltip=tip))
    n = d["run"].nunique() * d["alignment"].nunique()
    width = max(WIDTH, 36 * n)  # a readable bar per (run, alignment)
    return alt.layer(*layers, data=d).properties(width=width, height=TALL).facet(
        facet=alt.Facet("variable:N", title=None),
        columns=max(1, min(4, PLOT_WIDTH // (width + 60))))


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
        caption=("Each cell: the verdict, the test IIA on the pairs that test the "
                 "intervention, with its 95 % Wilson interval over those pairs (at the "
                 "alignment's k and site with the best training IIA), then its controls' test "
                 "IIA at that site and k: an untrained random rotation; the same alignment "
                 "searched with the variable's values shuffled across pairs (shuffled); and "
                 "searched on the untrained (step-0) network, both climbing the search's k "
                 "ladder with its warm starts and restarts; and the pair set's chance level. "
                 "OAF: orthogonal; LAF: linear, ours (a rotation times the "
                 "authors' symmetric matrix, started at a random rotation); LAF (authors'): "
                 "their linear alignment trained their way. Rows with seed \"all\": the mean "
                 "over seeds with a 95 % t interval. Rule, under the table: " + RULE + "; "
                 f"a run below test accuracy {LEARNED_ACC} did not learn the task and gets no "
                 "verdict (its numbers are shown: where the readout reads the answer, a "
                 "network scores there whether or not it computes the variable)."),
        table=verdict_table(numbers), links=_comparison_links(runs, numbers)),
        *lines,
        Figure(key="verdict-rule", title="Verdict rule",
               caption="How a cell's verdict follows from its numbers; a variable whose test "
                       "split has too few tested pairs is not scored; without the random or "
                       "the shuffled control a cell reads \"no control\".",
               table=pd.DataFrame({"verdict": ["aligned", "partial", "not aligned",
                                               "did not learn"],
                                   "when": [f"lower end ≥ {BAR} + {MARGIN} and "
                                            f"IIA ≥ {ALIGNED_IIA}",
                                            f"lower end ≥ {BAR} + {MARGIN} and "
                                            f"IIA < {ALIGNED_IIA}", "otherwise",
                                            f"the run's test accuracy < {LEARNED_ACC}"]}))]
    chart = _chart(numbers, runs)
    if chart is not None:
        figs.append(Figure(
            key="verdict-iia", title="IIA with its interval against the controls",
            caption=("Dot (shape: the alignment) and bar: each trained alignment's test IIA on "
                     "tested pairs and its 95 % Wilson interval; ticks beside it, that "
                     "alignment's controls: dotted the random rotation, solid the shuffled "
                     "variable, dashed the step-0 network — an alignment is aligned where the "
                     f"bar clears every tick by {MARGIN} and the dot reaches {ALIGNED_IIA}."),
            chart=chart))
    return figs
