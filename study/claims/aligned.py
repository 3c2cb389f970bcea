"""Is a variable aligned in a run: the table `verdicts` (one row per run, causal variable
and trained alignment) — the candidate, its controls and its verdict (`study.claims.rules`).

Per run, variable and alignment (tables `das`, `das_shuffled`, `das_control`, test split,
IIA on tested pairs: the network itself gives the base label and not the counterfactual
one):
- the candidate: among that alignment's rows at every site and k, the one with the best
  *training-split* IIA (ties: smaller k) [ours: choosing by test IIA would bias the number
  upward]; its test IIA and 95 % Wilson interval over the tested pairs;
- the random-rotation control: the test IIA of the untrained random rotation at the
  candidate's site and k (table `das`);
- the shuffled-variable control, the main trained control: the same alignment searched on
  the trained network with the variable's values shuffled across pairs (table
  `das_shuffled`, `study/analyses/das/controls.py`);
- the step-0 control: the same alignment searched on the untrained (step-0) network (table
  `das_control`); where a run has no step-0 table the verdict is judged against the other
  two.
The controls climb the search's k ladder with its warm starts and restarts, so each is read
at the candidate's own site and k, where it had the same optimisation as the candidate; a
run whose controls did not run there is read at the best over what ran [ours].

With several seeds of an architecture, each (model, variable, alignment) also gets the mean
test IIA over seeds with a 95 % t interval (`seed_interval`: the larger of the seeds' and the
restarts' spread). A run below `LEARNED_ACC` test accuracy gets "did not learn" instead of a
verdict, its numbers still given (`study.claims.learnt`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from study.claims.learnt import LEARNED_ACC, accuracy_on_test, display_label
from study.claims.rules import verdict
from study.core.alignments import control, trained
from study.core.intervals import t_interval
from study.core.sites import site_label
from study.core.tables import DAS, DAS_CONTROL, DAS_SHUFFLED

COLUMNS = ["run", "model", "seed", "variable", "alignment", "where", "iia", "iia_lo", "iia_hi",
           "restart_sd", "random", "shuffled", "step0", "chance", "confound_input",
           "confound_answer", "too_few", "verdict",
           "n_seeds", "seeds_iia", "seeds_lo", "seeds_hi", "acc_test"]


def chosen_on_train(das: pd.DataFrame) -> pd.Series | None:
    """Of one (variable, alignment)'s das rows (both splits, any sites and k), the test row
    at the (site, layer, position, k) with the best *training-split* IIA, ties to the smaller
    k [ours: the test split never chooses, so the test IIA quoted is not selected on]; None
    where no training row is scored."""
    train = das[das["split"] == "train"].dropna(subset=["iia"])
    if train.empty:
        return None
    pick = train.sort_values(["iia", "k"], ascending=[False, True], kind="stable").iloc[0]
    test = das[das["split"] == "test"]
    for c in ("site", "layer", "position", "k"):
        test = test[test[c] == pick[c]]
    return test.iloc[0] if len(test) else None


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
                iia = lo = hi = sd = chance = c_in = c_ans = float("nan")
                where = ""
                if cand is not None:
                    chance = float(cand.get("chance", np.nan))
                    # what a network holding only the input or the answer scores (tables
                    # written before these columns: NaN, not checked)
                    c_in, c_ans = (float(cand.get(c, np.nan))
                                   for c in ("confound_input", "confound_answer"))
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
                                 step0=ctl[1], chance=chance, confound_input=c_in,
                                 confound_answer=c_ans, too_few=too_few, acc_test=acc,
                                 verdict=("did not learn" if acc < LEARNED_ACC
                                          else verdict(iia, lo, random, *ctl, c_in,
                                                       c_ans))))
    out = pd.DataFrame(rows, columns=COLUMNS)
    for _, g in out.groupby(["model", "variable", "alignment"], sort=False):
        n = int(g["iia"].notna().sum())
        mean, lo, hi = seed_interval(g["iia"], g["restart_sd"])
        out.loc[g.index, ["n_seeds", "seeds_iia", "seeds_lo", "seeds_hi"]] = (
            n, mean if n > 1 else np.nan, lo, hi)
    return out
