"""The verdict in plain words: one sentence per causal variable, made from the verdict table
(`study.claims.aligned.verdict_numbers`), saying which architectures hold the variable in a
subspace of the network and which do not, at which site and k [ours].

Each run is read at its best trained alignment (the strongest verdict, ties to the higher
test IIA); an architecture with several seeds is named once per verdict, with how many of
its seeds give it, e.g.

    count: gru and lstm hold it in a subspace (gru: LAF, k = 2 at state, IIA 0.99; lstm: ...);
    rope2 does not (best: OAF, k = 16 at resid[1], IIA 0.41).
"""
from __future__ import annotations

import math

import pandas as pd

from study.core.alignments import label_of

# Strongest first: a run is summarised by its best alignment's verdict.
ORDER = ("aligned", "partial", "not aligned", "confounded with the input",
         "confounded with the answer", "confounded with the input and the answer",
         "no control", "too few pairs", "did not learn")

# What each verdict says of the architectures that get it (plural, singular).
SAYS = {
    "aligned": ("hold it in a subspace", "holds it in a subspace"),
    "partial": ("hold part of it in a subspace (IIA under the bar for aligned)",
                "holds part of it in a subspace (IIA under the bar for aligned)"),
    "not aligned": ("do not", "does not"),
    "no control": ("have no control to judge against", "has no control to judge against"),
    "too few pairs": ("have too few tested pairs to judge", "has too few tested pairs to judge"),
    "did not learn": ("did not learn the task", "did not learn the task"),
}


def _rank(v: str) -> int:
    return ORDER.index(v) if v in ORDER else len(ORDER)


def best_per_run(numbers: pd.DataFrame) -> pd.DataFrame:
    """Per (run, variable), the row of its strongest verdict (ties: the higher test IIA)."""
    if numbers.empty:
        return numbers
    d = numbers.assign(_r=numbers["verdict"].map(_rank), _i=numbers["iia"].fillna(-1.0))
    d = d.sort_values(["_r", "_i"], ascending=[True, False], kind="stable")
    return d.drop_duplicates(["run", "variable"]).drop(columns=["_r", "_i"])


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def where_words(row, interval: bool = False) -> str:
    """'LAF, k = 2 at state, IIA 0.99' from a verdict row ('' where nothing was scored);
    `interval`: the IIA with its 95 % interval, over the architecture's seeds where it has
    several ('IIA 0.95 [0.92, 0.99] over 5 seeds'), else over the run's pairs."""
    where, iia = str(row.get("where") or ""), row.get("iia")
    if not where or _nan(iia):
        return ""
    k, _, site = where.partition(" ")
    k = k.replace("k=", "k = ")
    said = f"IIA {float(iia):.2f}"
    if interval:
        n = row.get("n_seeds")
        if not _nan(n) and int(n) > 1 and not _nan(row.get("seeds_lo")):
            said = (f"IIA {float(row['seeds_iia']):.2f} [{float(row['seeds_lo']):.2f}, "
                    f"{float(row['seeds_hi']):.2f}] over {int(n)} seeds")
        elif not _nan(row.get("iia_lo")):
            said += f" [{float(row['iia_lo']):.2f}, {float(row['iia_hi']):.2f}]"
    return f"{label_of(row['alignment'])}, {k} at {site}, {said}"


def _names(models: list[str]) -> str:
    return models[0] if len(models) == 1 else ", ".join(models[:-1]) + " and " + models[-1]


def _clause(verdict: str, group: pd.DataFrame, totals: dict, interval: bool = False) -> str:
    """One clause: the architectures in `group` (best rows of one verdict) and what they show."""
    models = sorted(dict.fromkeys(group["model"]))
    named = []
    for m in models:
        n, of = int((group["model"] == m).sum()), totals[m]
        seeds = f"{n} of {of}" if n < of else "both" if of == 2 else f"all {of}"
        named.append(m if of == 1 else f"{m} ({seeds} seeds)")
    who = _names(named)
    plural = len(models) > 1
    if verdict.startswith("confounded"):
        said = (f"the pairs cannot tell it from {verdict[len('confounded with '):]} for "
                f"{who}")
    else:
        said = f"{who} {SAYS.get(verdict, ('give ' + verdict, 'gives ' + verdict))[not plural]}"
    if verdict in ("did not learn", "too few pairs", "no control"):
        return said
    details = []
    for m in models:
        rows = group[group["model"] == m].sort_values("iia", ascending=False, na_position="last")
        text = where_words(rows.iloc[0], interval)
        if text:
            details.append((m, text))
    if not details:
        return said
    lead = "best: " if verdict == "not aligned" or verdict.startswith("confounded") else ""
    if len(details) == 1 and len(models) == 1:
        return f"{said} ({lead}{details[0][1]})"
    return f"{said} ({'; '.join(f'{m}: {lead}{t}' for m, t in details)})"


def sentences(numbers: pd.DataFrame, interval: bool = False) -> list[str]:
    """One sentence per causal variable (in the table's order) from a verdict table with the
    columns of `study.claims.aligned.COLUMNS` (at least run, model, variable, alignment,
    where, iia, verdict); the architectures named in order of their verdicts, strongest
    first; `interval`: each IIA with its interval (`where_words`)."""
    best = best_per_run(numbers)
    if best.empty:
        return []
    out = []
    for variable in dict.fromkeys(best["variable"]):
        g = best[best["variable"] == variable]
        totals = g.groupby("model")["run"].nunique().to_dict()
        clauses = [_clause(v, g[g["verdict"] == v], totals, interval)
                   for v in sorted(g["verdict"].unique(), key=_rank)]
        out.append(f"{variable}: " + "; ".join(clauses) + ".")
    return out


# what a verdict table made before the pairs' confound shares were measured lacks
CONFOUND_COLUMNS = ("confound_input", "confound_answer")
UNDER_REVISION = "under revision: made before the confound controls"


# a verdict as the short findings say it of the architectures that get it
SHORT = {"aligned": "held in a subspace by", "partial": "partly held by",
         "not aligned": "not held by", "no control": "without a control in",
         "too few pairs": "too few tested pairs in", "did not learn": "not learnt by"}


def _short(verdict: str) -> str:
    if verdict.startswith("confounded with "):
        return f"not separable from {verdict[len('confounded with '):]} in"
    return SHORT.get(verdict, verdict + " in")


def _iia_words(row) -> str:
    """'0.95 [0.92, 0.99]': the IIA with its interval, over seeds where there are several."""
    n = row.get("n_seeds")
    if not _nan(n) and int(n) > 1 and not _nan(row.get("seeds_lo")):
        return (f"{float(row['seeds_iia']):.2f} [{float(row['seeds_lo']):.2f}, "
                f"{float(row['seeds_hi']):.2f}]")
    if _nan(row.get("iia")):
        return ""
    if _nan(row.get("iia_lo")):
        return f"{float(row['iia']):.2f}"
    return f"{float(row['iia']):.2f} [{float(row['iia_lo']):.2f}, {float(row['iia_hi']):.2f}]"


def findings(numbers: pd.DataFrame) -> list[str]:
    """The short findings of a result folder's verdict table, one per variable: each
    architecture under the verdict most of its seeds give (ties: the weaker), with the test
    IIA of its best alignment and the interval over its seeds (over the run's pairs for one
    seed), e.g. "up_down:count (5 seeds): held in a subspace by gru 0.99 [0.99, 1.00] and
    lstm 0.99 [0.98, 1.00]; not held by rope2 0.06 [0.05, 0.07]". A table without the
    confound shares (`CONFOUND_COLUMNS`) gets each finding marked `UNDER_REVISION`: its
    verdicts claim more than its controls allow."""
    best = best_per_run(numbers)
    out = []
    for variable in dict.fromkeys(best["variable"]):
        g = best[best["variable"] == variable]
        chosen = {}
        for m in dict.fromkeys(g["model"]):
            rows = g[g["model"] == m]
            counts = rows["verdict"].value_counts()
            top = sorted(counts.index[counts == counts.max()], key=_rank)[-1]
            pick = rows[rows["verdict"] == top].sort_values("iia", ascending=False,
                                                             na_position="last").iloc[0]
            words = _iia_words(pick)
            site = str(pick.get("where") or "").partition(" ")[2]
            if top != "aligned" and words and site:  # what is not held, is not held there
                words += f" at {site}"
            chosen[m] = (top, words)
        seeds = sorted(set(g.groupby("model")["run"].nunique()))
        lead = (f"{variable} ({seeds[0]} seed{'s' if seeds[0] > 1 else ''} each)"
                if len(seeds) == 1 else variable)
        parts = []
        for verdict in sorted({v for v, _ in chosen.values()}, key=_rank):
            who = [f"{m} {w}".strip() for m, (v, w) in chosen.items() if v == verdict]
            parts.append(f"{_short(verdict)} {_names(who)}")
        said = f"{lead}: " + "; ".join(parts)
        if not set(CONFOUND_COLUMNS) <= set(numbers.columns):
            said += f" ({UNDER_REVISION})"
        out.append(said + ".")
    return out
