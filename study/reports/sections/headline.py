"""Section: the headline numbers of every (model, seed) of a task, and their spread over seeds.
Each table grows with the number of runs in one direction only (runs as rows for accuracy, as
columns for IIA; models as columns for the spread), so it stays inside the page for tasks with
many splits, variables and alignments."""
from __future__ import annotations

import numpy as np
import pandas as pd

from study.core.sites import site_label
from study.core.tables import DAS
from study.reports.figure import Figure
from study.reports.sections import section
from study.claims.aligned import chosen_on_train
from study.reports.sections._common import (first_k_above, fmt, several_seeds,
                                            stacked)

THRESHOLD = 0.9  # "the k where IIA first passes 0.9"


def headline_numbers(runs) -> pd.DataFrame:
    """One row per run: model, seed, accuracy per scored split, and per (variable, alignment)
    the test IIA at the site and k chosen on the training split (`chosen_on_train`) and the
    smallest k whose training IIA reaches THRESHOLD (numbers): the test split chooses
    nothing."""
    das = stacked(runs, DAS.name)
    rows = []
    for r in runs:
        row = {"run": r.label, "model": r.model, "seed": r.seed}
        for split, acc in sorted((r.summary.get("accuracy") or {}).items(),
                                 key=lambda kv: (kv[0] != "test", kv[0])):
            if isinstance(acc, dict) and "all" in acc:
                row[f"acc {split}"] = float(acc["all"])
        if das is not None:
            d = das[das["run"] == r.label]
            for (var, al), g in d.groupby(["variable", "alignment"], sort=True):
                cand = chosen_on_train(g)
                row[f"IIA {var} {al}"] = np.nan if cand is None else float(cand["iia"])
                row[f"chosen {var} {al}"] = ("" if cand is None else
                                             f"k {int(cand['k'])} at "
                                             f"{site_label(cand['site'], cand['layer'])}")
                row[f"k@{THRESHOLD} {var} {al}"] = first_k_above(g[g["split"] == "train"],
                                                                 THRESHOLD)
        rows.append(row)
    return pd.DataFrame(rows)


def accuracy_table(numbers: pd.DataFrame) -> pd.DataFrame:
    """Rows: runs; columns: accuracy per scored split (shown to 3 decimals)."""
    cols = ["run", "model", "seed", *(c for c in numbers.columns if c.startswith("acc"))]
    out = numbers[cols].copy()
    for c in cols[3:]:
        out[c] = [fmt(v) for v in out[c]]
    return out


def iia_table(numbers: pd.DataFrame) -> pd.DataFrame:
    """Rows: (variable, alignment); columns: runs; each cell the test IIA at the site and k
    chosen on the training split (the verdict's candidate, `chosen_on_train`), that k and
    site, and the smallest k whose training IIA passes THRESHOLD, each named: '0.992 (k 16 at
    state; train ≥ 0.9 from k 2)'. Runs as columns keep the table as wide
    as the number of runs, whatever the number of variables and alignments."""
    pairs = [c[len("IIA "):] for c in numbers.columns if c.startswith("IIA ")]
    rows = []
    for pair in pairs:
        variable, _, alignment = pair.rpartition(" ")
        row = {"variable": variable, "alignment": alignment}
        for r in numbers.to_dict("records"):
            k = r.get(f"k@{THRESHOLD} {pair}", np.nan)
            first = "never" if pd.isna(k) else f"from k {int(k)}"
            row[r["run"]] = fmt(r[f"IIA {pair}"]) + (
                "" if pd.isna(r[f"IIA {pair}"]) else
                f" ({r[f'chosen {pair}']}; train ≥ {THRESHOLD} {first})")
        rows.append(row)
    return pd.DataFrame(rows, columns=["variable", "alignment", *numbers["run"]])


def spread_over_seeds(numbers: pd.DataFrame) -> pd.DataFrame:
    """Per model: mean ± standard deviation over seeds of every headline number."""
    cols = [c for c in numbers.columns if c.startswith(("acc", "IIA", "k@"))]
    rows = []
    for model, g in numbers.groupby("model", sort=True):
        row = {"model": model, "seeds": len(g)}
        for c in cols:
            v = g[c].dropna()
            text = fmt(v.mean(), v.std(ddof=1) if len(v) > 1 else 0.0, len(v),
                       digits=1 if c.startswith("k@") else 3) if len(v) else "—"
            if 0 < len(v) < len(g):  # e.g. seeds whose IIA never reached the threshold
                text += f" ({len(v)} of {len(g)} seeds)"
            row[c] = text
        rows.append(row)
    return pd.DataFrame(rows)


def by_number(spread: pd.DataFrame) -> pd.DataFrame:
    """`spread_over_seeds` turned on its side: rows are the numbers, columns the models, so the
    table stays as wide as the number of architectures."""
    out = spread.set_index("model").T.reset_index().rename(columns={"index": "number"})
    out.columns.name = None
    return out.astype(str)


@section("headline", "Headline numbers", order=0)
def build(runs) -> list[Figure]:
    numbers = headline_numbers(runs)
    figs = [Figure(
        key="headline", title="Accuracy per model and seed",
        caption="Accuracy on each scored split — compare architectures along a column.",
        table=accuracy_table(numbers))]
    iia = iia_table(numbers)
    if len(iia):
        figs.append(Figure(
            key="headline-iia", title="Test IIA per causal variable and alignment",
            caption=(f"Each cell: the test IIA at the site and k with the best training IIA, "
                     f"the verdict's own candidate (the test split chooses nothing), then that "
                     f"k and site and the smallest k whose training IIA passes {THRESHOLD} — "
                     f"compare architectures along a row. IIA is on the pairs that test the "
                     f"intervention (the network gives the base answer and not the "
                     f"counterfactual one; — where too few do)."),
            table=iia))
    if several_seeds(runs):
        figs.append(Figure(
            key="headline-spread", title="Headline numbers over seeds",
            caption=("Mean ± standard deviation over seeds, one column per architecture (k@"
                     f"{THRESHOLD}: the smallest k whose training IIA passes {THRESHOLD}); a "
                     "spread as large as the gap between architectures means the gap is not "
                     "established."),
            table=by_number(spread_over_seeds(numbers))))
    return figs
