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


def where_words(row) -> str:
    """'LAF, k = 2 at state, IIA 0.99' from a verdict row ('' where nothing was scored)."""
    where, iia = str(row.get("where") or ""), row.get("iia")
    if not where or iia is None or (isinstance(iia, float) and math.isnan(iia)):
        return ""
    k, _, site = where.partition(" ")
    k = k.replace("k=", "k = ")
    return f"{label_of(row['alignment'])}, {k} at {site}, IIA {float(iia):.2f}"


def _names(models: list[str]) -> str:
    return models[0] if len(models) == 1 else ", ".join(models[:-1]) + " and " + models[-1]


def _clause(verdict: str, group: pd.DataFrame, totals: dict) -> str:
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
        text = where_words(rows.iloc[0])
        if text:
            details.append((m, text))
    if not details:
        return said
    lead = "best: " if verdict == "not aligned" or verdict.startswith("confounded") else ""
    if len(details) == 1 and len(models) == 1:
        return f"{said} ({lead}{details[0][1]})"
    return f"{said} ({'; '.join(f'{m}: {lead}{t}' for m, t in details)})"


def sentences(numbers: pd.DataFrame) -> list[str]:
    """One sentence per causal variable (in the table's order) from a verdict table with the
    columns of `study.claims.aligned.COLUMNS` (at least run, model, variable, alignment,
    where, iia, verdict); the architectures named in order of their verdicts, strongest
    first."""
    best = best_per_run(numbers)
    if best.empty:
        return []
    out = []
    for variable in dict.fromkeys(best["variable"]):
        g = best[best["variable"] == variable]
        totals = g.groupby("model")["run"].nunique().to_dict()
        clauses = [_clause(v, g[g["verdict"] == v], totals)
                   for v in sorted(g["verdict"].unique(), key=_rank)]
        out.append(f"{variable}: " + "; ".join(clauses) + ".")
    return out
