"""Section: the verdict — for each architecture and causal variable, is the variable aligned
with a subspace of the network, judged against both DAS controls?

Per run and variable (tables `das` and `das_control`, test split, IIA on tested pairs: the network itself gives the base label and not the counterfactual one):
- the candidate: among the trained alignments (OAF, LAF) at every site and k, the one with the
  best *training-split* IIA (ties: smaller k, OAF first) [ours: choosing by test IIA would
  bias the number upward]; its test IIA and 95 % Wilson interval;
- the random-rotation control: the best test IIA of the untrained random rotation over sites
  and k (table `das`);
- the trained control: the best test IIA of OAF and LAF trained on the untrained step-0
  network, over sites and k (table `das_control`) [ours: an alignment search can find a
  "variable" in a network that never learned anything, which the random rotation misses].
The controls take their best over k and sites, so the bar is the hardest of them [ours].

Rule (`verdict`) [ours]: aligned when the interval's lower end clears the higher of the two
controls by `MARGIN` and IIA >= `ALIGNED_IIA`; partial when it clears them but IIA is lower;
not aligned otherwise. A variable with too few tested test pairs is "too few pairs"; with
no control table, "no control".
"""
from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

from study.core.sites import site_label
from study.core.tables import COMPARE_GEOMETRY, COMPARE_SIMILARITY, COMPARE_STITCHING, DAS, DAS_CONTROL
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._common import HEIGHT, WIDTH, model_color

MARGIN = 0.1  # the lower end of the interval must clear both controls by this much
ALIGNED_IIA = 0.9  # and the IIA itself reach this, for "aligned"
TRAINED = ("oaf", "laf")
RULE = (f"aligned: the lower end of the 95 % interval ≥ max(random, step 0) + {MARGIN} and "
        f"IIA ≥ {ALIGNED_IIA}; partial: the lower end ≥ max(random, step 0) + {MARGIN} and "
        f"IIA < {ALIGNED_IIA}; not aligned: otherwise")


def verdict(iia: float, lo: float, random: float, step0: float) -> str:
    """'aligned' | 'partial' | 'not aligned' by the rule above; 'too few pairs' where the IIA
    is not scored, 'no control' where a control is missing."""
    if iia is None or math.isnan(iia) or lo is None or math.isnan(lo):
        return "too few pairs"
    if any(c is None or math.isnan(c) for c in (random, step0)):
        return "no control"
    if lo >= max(random, step0) + MARGIN:
        return "aligned" if iia >= ALIGNED_IIA else "partial"
    return "not aligned"


def _test(df: pd.DataFrame | None) -> pd.DataFrame:
    if df is None:
        return pd.DataFrame(columns=["variable", "alignment", "split", "iia"])
    return df[df["split"] == "test"]


def _best(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.max()) if len(v) else float("nan")


def _candidate(das: pd.DataFrame) -> pd.Series | None:
    """The trained (alignment, site, position, k) with the best training IIA: its test row."""
    key = ["alignment", "site", "layer", "position", "k"]
    d = das[das["alignment"].isin(TRAINED)]
    train = d[d["split"] == "train"].dropna(subset=["iia"])
    if train.empty:
        return None
    train = train.assign(_a=train["alignment"].map({a: i for i, a in enumerate(TRAINED)}))
    pick = train.sort_values(["iia", "k", "_a"], ascending=[False, True, True]).iloc[0]
    test = d[(d["split"] == "test")]
    for c in key:
        test = test[test[c] == pick[c]]
    return test.iloc[0] if len(test) else None


def verdict_numbers(runs) -> pd.DataFrame:
    """One row per (run, variable): the candidate's test IIA and interval, both controls and
    the verdict."""
    rows = []
    for r in runs:
        das = r.final(DAS.name)
        if das is None:
            continue
        control = _test(r.final(DAS_CONTROL.name))
        for variable, d in das.groupby("variable", sort=False):
            cand = _candidate(d)
            test = d[d["split"] == "test"]
            random = _best(test.loc[test["alignment"] == "random", "iia"])
            step0 = (_best(control.loc[control["variable"] == variable, "iia"])
                     if len(control) else float("nan"))
            iia = lo = hi = sd = float("nan")
            where, too_few = "", bool(test["too_few"].any()) if "too_few" in test else False
            if cand is not None:
                iia, lo, hi, sd = (float(cand.get(c, np.nan))
                                   for c in ("iia", "iia_lo", "iia_hi", "iia_restart_sd"))
                where = (f"{cand['alignment']} k={int(cand['k'])} "
                         f"{site_label(cand['site'], cand['layer'])}")
            rows.append(dict(run=r.label, model=r.model, seed=r.seed, variable=variable,
                             where=where, iia=iia, iia_lo=lo, iia_hi=hi, restart_sd=sd,
                             random=random,
                             step0=step0, too_few=too_few,
                             verdict=verdict(iia, lo, random, step0)))
    return pd.DataFrame(rows, columns=["run", "model", "seed", "variable", "where", "iia",
                                       "iia_lo", "iia_hi", "restart_sd", "random", "step0",
                                       "too_few", "verdict"])


def _num(v: float) -> str:
    return "—" if v is None or math.isnan(v) else f"{v:.2f}"


def _cell(row) -> str:
    if row["verdict"] == "too few pairs":
        return "too few tested pairs"
    return (f"{row['verdict']}: {_num(row['iia'])} [{_num(row['iia_lo'])}, "
            f"{_num(row['iia_hi'])}] ({row['where']}); random {_num(row['random'])}, "
            f"step 0 {_num(row['step0'])}")


def verdict_table(numbers: pd.DataFrame) -> pd.DataFrame:
    """Rows: runs (architecture and seed); columns: the causal variables; cells as text."""
    if numbers.empty:
        return pd.DataFrame()
    variables = list(dict.fromkeys(numbers["variable"]))
    out = []
    for run, g in numbers.groupby("run", sort=False):
        row = {"model": g["model"].iloc[0], "seed": int(g["seed"].iloc[0])}
        cells = {v: _cell(x) for v, x in zip(g["variable"], g.to_dict("records"))}
        row.update({v: cells.get(v, "—") for v in variables})
        out.append(row)
    return pd.DataFrame(out).sort_values(["model", "seed"]).reset_index(drop=True)


def _chart(numbers: pd.DataFrame, runs) -> alt.FacetChart | None:
    d = numbers.dropna(subset=["iia"])
    if d.empty:
        return None
    x = alt.X("run:N", title=None, sort=sorted(d["run"].unique()))
    y = dict(scale=alt.Scale(domain=[0, 1]))
    tip = ["run:N", "variable:N", "where:N", alt.Tooltip("iia:Q", format=".3f"),
           alt.Tooltip("iia_lo:Q", format=".3f"), alt.Tooltip("iia_hi:Q", format=".3f"),
           alt.Tooltip("restart_sd:Q", format=".3f", title="sd over restarts"),
           alt.Tooltip("random:Q", format=".3f"), alt.Tooltip("step0:Q", format=".3f"),
           "verdict:N"]
    bars = alt.Chart().mark_rule(strokeWidth=2).encode(
        x=x, y=alt.Y("iia_lo:Q", title="test IIA on tested pairs", **y), y2="iia_hi:Q",
        color=model_color(runs, legend=False))
    point = alt.Chart().mark_point(filled=True, size=60).encode(
        x=x, y=alt.Y("iia:Q", **y), color=model_color(runs), tooltip=tip)
    layers = [bars, point]
    for field, dash, title in (("random", [2, 2], "random rotation"),
                               ("step0", [6, 3], "trained on step 0")):
        if d[field].notna().any():
            layers.append(alt.Chart().mark_tick(color="gray", thickness=2, size=22,
                                                strokeDash=dash).encode(
                x=x, y=alt.Y(f"{field}:Q", **y), tooltip=tip))
    return alt.layer(*layers, data=d).properties(width=max(WIDTH // 2, 40 * d["run"].nunique()),
                                                 height=HEIGHT).facet(
        facet=alt.Facet("variable:N", title=None), columns=4)


_COMPARISONS = ((COMPARE_SIMILARITY.name, "compare-similarity", "similarity across runs"),
                (COMPARE_GEOMETRY.name, "compare-geometry", "geometry of its values"),
                (COMPARE_STITCHING.name, "compare-stitching", "cross-model interchange"))


def _comparison_links(runs, numbers: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """Links to the cross-run figures (the `compare_*` sections) of the verdict's variables,
    where the runs hold those tables."""
    from study.reports.sections._compare import cross_table
    links = []
    for table, prefix, text in _COMPARISONS:
        df = cross_table(runs, table)
        if df is None or "variable" not in df:
            continue
        for variable in dict.fromkeys(numbers["variable"]):
            if (df["variable"] == variable).any():
                links.append((f"{variable}: {text}", slug(prefix, variable)))
    return tuple(links)


@section("verdict", "Verdict: which variables are aligned", order=-10)
def build(runs) -> list[Figure]:
    numbers = verdict_numbers(runs)
    if numbers.empty:
        return []
    figs = [Figure(
        key="verdict", title="Verdict per architecture and causal variable",
        caption=("Each cell: the verdict, the test IIA on the pairs that test the "
                 "intervention, with "
                 "its 95 % Wilson interval (at the trained alignment, k and site with the "
                 "best training IIA), then both controls' best test IIA: an untrained random "
                 "rotation, and OAF/LAF trained on the untrained (step-0) network. Rule, under "
                 "the table: " + RULE + "."),
        table=verdict_table(numbers), links=_comparison_links(runs, numbers)),
        Figure(key="verdict-rule", title="Verdict rule",
               caption="How a cell's verdict follows from its numbers; a variable whose test "
                       "split has too few tested pairs is not scored.",
               table=pd.DataFrame({"verdict": ["aligned", "partial", "not aligned"],
                                   "when": [f"lower end ≥ max(random, step 0) + {MARGIN} and "
                                            f"IIA ≥ {ALIGNED_IIA}",
                                            f"lower end ≥ max(random, step 0) + {MARGIN} and "
                                            f"IIA < {ALIGNED_IIA}", "otherwise"]}))]
    chart = _chart(numbers, runs)
    if chart is not None:
        figs.append(Figure(
            key="verdict-iia", title="IIA with its interval against both controls",
            caption=("Dot and bar: the chosen alignment's test IIA on tested pairs and its "
                     "95 % interval; dotted tick: the random rotation, dashed tick: OAF/LAF "
                     "trained on the step-0 network — a variable is aligned where the bar "
                     f"clears both ticks by {MARGIN} and the dot reaches {ALIGNED_IIA}."),
            chart=chart))
    return figs
