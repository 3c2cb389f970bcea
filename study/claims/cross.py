"""Reading the cross-run comparison tables (`compare_similarity`, `compare_geometry`,
`compare_stitching`, written into each run's `analyses/compare/` by `study compare` and the
sweep) over a set of runs: rows of every given run, duplicates dropped, rows naming another
run dropped, run paths replaced by the runs' labels (with `@step` when a run was compared at
several checkpoints, and " (not learnt, acc 0.55)" below `LEARNED_ACC`); the matched-k rule
that picks the rows a pair of runs is judged at; and B's shuffled control beside each
stitching row."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from study.claims.learnt import display_label, learnt


def _key(path) -> str:
    return str(Path(str(path)).resolve())


def _by_run(runs, value) -> dict:
    """`value(run)` under each run's resolved path and, where no other run of the report has
    the same directory name, under that name: a comparison table names each run by the path
    `compare` was given, which may be relative to another working directory."""
    names = [Path(str(r.path)).name for r in runs]
    by_name = {n: value(r) for n, r in zip(names, runs) if names.count(n) == 1}
    return {**by_name, **{_key(r.path): value(r) for r in runs}}


def _find(by_run: dict, path):
    """A `_by_run` mapping's entry for a run named by `path` (None: not a run of the report)."""
    return by_run.get(_key(path), by_run.get(Path(str(path)).name))


def cross_table(runs, name: str) -> pd.DataFrame | None:
    """The table `name` over the report's runs, with `run` / `other_run` as run labels and
    `run_learnt` / `other_run_learnt` saying whether each reached `LEARNED_ACC`."""
    parts = [r.tables[name] for r in runs if name in r.tables and not r.tables[name].empty]
    if not parts:
        return None
    df = pd.concat(parts, ignore_index=True)
    labels = _by_run(runs, display_label)
    cols = [c for c in ("run", "other_run") if c in df.columns]
    keys = {c: df[c].map(lambda p: _find(labels, p)) for c in cols}
    keep = pd.Series(True, index=df.index)
    for c in cols:
        keep &= keys[c].notna()
    df = df[keep].copy()
    if df.empty:
        return None
    ok = _by_run(runs, learnt)
    for c in cols:
        df[f"{c}_learnt"] = df[c].map(lambda p: _find(ok, p))
        df[c] = keys[c][keep]
    step_col = {"run": "checkpoint", "other_run": "other_checkpoint"}
    for c in cols:
        steps = df.groupby(c)[step_col[c]].nunique()
        many = set(steps[steps > 1].index)
        if many:
            df[c] = [f"{lab} @{int(s)}" if lab in many else lab
                     for lab, s in zip(df[c], df[step_col[c]])]
    return df.drop_duplicates().reset_index(drop=True)


def at_matched_k(df: pd.DataFrame) -> pd.DataFrame:
    """The matched-k rule: the rows at each pair's matched k (`compare_*`'s `matched_k`: the
    larger of the two runs' own k, `study.analyses.compare.choice`); per run
    (`compare_geometry`), at the run's own k (`auto_k`). A row without it (a table written
    before those columns existed, or a pair whose own k was not found): its variable's
    largest k."""
    col = "matched_k" if "matched_k" in df.columns else "auto_k"
    largest = df.groupby("variable")["k"].transform("max")
    if col not in df.columns:
        return df[df["k"] == largest].reset_index(drop=True)
    target = df[col].where(df[col].notna(), largest)
    return df[df["k"] == target].reset_index(drop=True)


def with_receiver_control(df: pd.DataFrame, runs, table: str = "das_shuffled",
                          column: str = "shuffled_iia") -> pd.DataFrame:
    """`df` (a `cross_table` of stitching rows) with `column`: B's own search on its control
    `table` (`das_shuffled`: the variable's values shuffled across pairs within each value
    stratum, for binding's letters the letter-matched null) at B's site, the alignment and k
    of the row, on B's test pairs; NaN where B saved no such row."""
    from study.core.sites import site_key
    controls = {}
    for r in runs:
        t = r.final(table)
        if t is None or t.empty:
            continue
        t = t[(t["split"] == "test")]
        controls[display_label(r)] = {
            (v, a, int(k), site_key(s, int(layer), int(pos))): float(iia)
            for v, a, k, s, layer, pos, iia in t[["variable", "alignment", "k", "site", "layer",
                                                    "position", "iia"]].itertuples(index=False)}
    base = lambda label: str(label).split(" @")[0]  # noqa: E731 (a run compared at a step)
    out = df.copy()
    out[column] = [controls.get(base(b), {}).get((v, a, int(k), site), float("nan"))
                   for b, v, a, k, site in out[["other_run", "variable", "alignment", "k",
                                                "other_site"]].itertuples(index=False)]
    return out

