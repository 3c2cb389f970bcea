"""Reading the cross-run comparison tables (`compare_similarity`, `compare_geometry`,
`compare_stitching`, written into each run's `analyses/compare/` by `study compare` and the
sweep) for the sections that draw them: rows of every run in the report, duplicates dropped,
rows naming a run outside the report dropped, run paths replaced by the report's run labels
(with `@step` when a run was compared at several checkpoints, and " (not learnt, acc 0.55)" when
its test accuracy is below `LEARNED_ACC`: a network that has not learnt the task has no task
variable to compare, so a cross-architecture statement holds only between unmarked runs)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd


# test accuracy below which a run is marked as not having learnt its task [ours]
LEARNED_ACC = 0.9
NOT_LEARNT_NOTE = (f" Runs marked \"not learnt\" stay below {LEARNED_ACC:.0%} test accuracy: "
                   "they have no task variable to compare, so their rows and columns say "
                   "nothing about how architectures carry it.")


def accuracy_on_test(run) -> float:
    """The run's test accuracy (`summary.json`); NaN where not recorded."""
    acc = run.summary.get("test_accuracy")
    return float(acc) if isinstance(acc, (int, float)) else float("nan")


def display_label(run) -> str:
    """The run's label, marked when its test accuracy is below `LEARNED_ACC`."""
    if not learnt(run):
        return f"{run.label} (not learnt, acc {accuracy_on_test(run):.2f})"
    return run.label


def any_not_learnt(runs) -> bool:
    return not all(learnt(r) for r in runs)


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


def learnt(run) -> bool:
    """The run reached `LEARNED_ACC` (or recorded no test accuracy)."""
    return not accuracy_on_test(run) < LEARNED_ACC


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


def learnt_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of two different runs that both learnt the task (`run_learnt`,
    `other_run_learnt`; every run where those columns are absent) [ours: a network without
    the variable says nothing about how another architecture carries it]."""
    keep = df["run"] != df["other_run"]
    for c in ("run_learnt", "other_run_learnt"):
        if c in df:
            keep &= df[c].fillna(True).astype(bool)
    return df[keep]


def at_matched_k(df: pd.DataFrame) -> pd.DataFrame:
    """The rows at each pair's matched k (`compare_*`'s `matched_k`: the larger of the two
    runs' own k, `study.analyses.compare.choice`); per run (`compare_geometry`), at the run's
    own k (`auto_k`). Tables written before those columns existed: their largest k."""
    col = "matched_k" if "matched_k" in df.columns else "auto_k"
    if col in df.columns and df[col].notna().any():
        return df[df["k"] == df[col]]
    return df[df["k"] == df.groupby("variable")["k"].transform("max")]


def k_note(df: pd.DataFrame, per_run: bool = False) -> str:
    """One caption sentence saying at which k the rows are (`at_matched_k`)."""
    ks = sorted(int(k) for k in set(df["k"]))
    said = f"k = {ks[0]}" if len(ks) == 1 else "k = " + ", ".join(map(str, ks))
    if "matched_k" not in df.columns and "auto_k" not in df.columns:
        return f" Shown at {said}, the largest k compared."
    how = ("each run at its own k" if per_run else "each pair of runs at its matched k (the "
           "larger of the two runs' own k)")
    return (f" Shown {how}: a run's own k is the smallest k whose own interchange IIA on "
            f"validation pairs reaches the bar (compare.k_bar), never chosen on test pairs "
            f"({said} here).")


def run_order(runs, present) -> list[str]:
    """Run labels in the report's order, then any others (checkpoint-suffixed) sorted."""
    present = list(dict.fromkeys(present))
    order = [display_label(r) for r in runs if display_label(r) in present]
    return order + sorted(p for p in present if p not in order)


def sites_note(df: pd.DataFrame) -> str:
    """One caption sentence naming the site each run was read at (`compare.site`), runs
    grouped by site."""
    if "site" not in df.columns or df.empty:
        return ""
    by_site: dict[str, list[str]] = {}
    for run, site in df[["run", "site"]].drop_duplicates().itertuples(index=False):
        by_site.setdefault(site, []).append(run)
    if len(by_site) == 1:
        return f" Every run is read at {next(iter(by_site))}."
    return " Sites read: " + "; ".join(f"{site} in {', '.join(runs)}"
                                       for site, runs in by_site.items()) + "."


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

