"""A study's claims as the tables of its result folder, made from its finished runs' tables
and its comparisons (no checkpoints, no torch). `study.sweep.result_tables` writes them to a
folder and `python -m study reproduce` compares them; each is declared in
`study.core.tables.RESULT_TABLES`, numbers stored as numbers:

- `summary`: per run, its update budget, the updates it made, how it ended, the accuracy on
  every scored split, the last training loss;
- `verdicts`: per run, variable and trained alignment, the verdict and its numbers
  (`study.claims.aligned`);
- `das_best`: per run, variable and alignment, the best test IIA over sites and k (ties: the
  smaller k), where it was reached and its interval over the tested pairs;
- `comparisons`: the cross-run similarity measures and stitching IIAs, one row per
  (variable, pair of runs, site, alignment, k, measure), each pair of runs at its matched k;
- `phases`: per run, the plateaus of its accuracy trajectory and the update each starts at;
- `alignment_gaps`: per model, variable and k, each alignment's test IIA against OAF's on the
  same run, paired by run: the mean difference over runs and its 95 % t interval (Grant et
  al.'s LAF − OAF over seeds);
- `run_gaps`: the same per run: each run's two IIAs and their difference;
- `das_curve`: every test IIA of every run's DAS search, per variable, alignment, site and k,
  with its interval: the curve behind `das_best`'s and the verdicts' choice of k and site,
  which `reproduce` compares where a rerun chose differently;
- `shared`: per variable and ordered pair of architectures, what they share
  (`study.claims.shared`);
- `emergence`: per run, variable and scored checkpoint, the IIA at the variable's atlas
  cell along training with its interval, the shuffled control and the atlas's null, and
  `appears_at` (`study.claims.emergence`), repeated on each of the run's rows.

Every table has a `time_limited` column: a run that the time guard stopped trained a network
the update budget did not decide, and is no study result.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from study.claims.aligned import verdict_numbers
from study.claims.cross import at_matched_k, cross_table, with_receiver_control
from study.claims.curves import accuracy_curves, eval_split
from study.claims.learnt import learnt_pairs
from study.claims.phases import detect
from study.claims.shared import STATS, shared_stats
from study.core.alignments import REFERENCE, trained
from study.core.intervals import t_interval
from study.core.tables import COMPARE_SIMILARITY, COMPARE_STITCHING, DAS

TABLES = ("summary", "verdicts", "das_best", "comparisons", "phases", "shared",
          "alignment_gaps", "run_gaps", "das_curve", "emergence")


def ended(summary: dict) -> str:
    """How a run's training ended: the time guard, its target accuracy, or all its updates."""
    if summary.get("time_limited"):
        return "time guard"
    return "target accuracy" if summary.get("stopped_early") else "all steps"


def _guarded(runs) -> dict[str, bool]:
    return {r.label: bool(r.summary.get("time_limited")) for r in runs}


def summary_table(runs) -> pd.DataFrame:
    rows = []
    splits = sorted({s for r in runs for s in (r.summary.get("accuracy") or {})},
                    key=lambda s: (s != "test", s))
    for r in runs:
        s = r.summary
        row = {"run": r.label, "task": r.task, "model": r.model, "seed": r.seed,
               "scale": r.scale, "steps": s.get("steps"), "steps_done": s.get("steps_done"),
               "ended": ended(s), "time_limited": bool(s.get("time_limited"))}
        for split in splits:
            acc = (s.get("accuracy") or {}).get(split) or {}
            row[f"acc_{split}"] = acc.get("all", math.nan)
        row["train_loss"] = s.get("train_loss", math.nan)
        row["n_params"] = s.get("n_params")
        rows.append(row)
    return pd.DataFrame(rows)


def verdicts_table(runs) -> pd.DataFrame:
    df = verdict_numbers(runs)
    guarded = _guarded(runs)
    df.insert(0, "run", df.pop("run").map(lambda label: label.split(" (")[0]))
    df["time_limited"] = df["run"].map(guarded).fillna(False).astype(bool)
    return df.reset_index(drop=True)


def das_best_table(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        das = r.final(DAS.name)
        if das is None:
            continue
        test = das[das["split"] == "test"].dropna(subset=["iia"])
        for (variable, alignment), g in test.groupby(["variable", "alignment"], sort=True):
            best = g.sort_values(["iia", "k"], ascending=[False, True], kind="stable").iloc[0]
            rows.append({"run": r.label, "model": r.model, "seed": r.seed, "variable": variable,
                         "alignment": alignment, "site": best["site"], "layer": int(best["layer"]),
                         "position": str(best["position"]), "k": int(best["k"]),
                         "iia": float(best["iia"]), "iia_lo": float(best["iia_lo"]),
                         "iia_hi": float(best["iia_hi"]), "n_tested": int(best["n_tested"]),
                         "time_limited": bool(r.summary.get("time_limited"))})
    return pd.DataFrame(rows)


def comparisons_table(runs, folder: Path | None) -> pd.DataFrame:
    """The sweep's similarity and stitching tables in one long table, runs by their labels,
    each pair of runs at its matched k (`matched_k`, where the tables have it): the report
    keeps every k, the folder the k each pair is judged at."""
    # the comparisons name runs by the paths the sweep gave them (relative to where it ran);
    # a run directory's name (config hash included) is unique within a sweep
    labels = {Path(r.path).name: r.label for r in runs}
    guarded = _guarded(runs)
    parts = []
    keys = ["variable", "run", "other_run", "model", "other_model", "site", "other_site",
            "alignment", "k"]
    if folder is not None and (folder / f"{COMPARE_SIMILARITY.name}.parquet").is_file():
        sim = at_matched_k(pd.read_parquet(folder / f"{COMPARE_SIMILARITY.name}.parquet"))
        if len(sim):
            parts.append(sim[keys + ["measure", "value", "baseline", "random_subspace"]])
    if folder is not None and (folder / f"{COMPARE_STITCHING.name}.parquet").is_file():
        st = at_matched_k(pd.read_parquet(folder / f"{COMPARE_STITCHING.name}.parquet"))
        for measure, baseline, control in (("stitched_iia", "own_iia", "random_subspace_iia"),
                                           ("shuffled_map_iia", None, None)):
            if len(st):
                parts.append(st[keys].assign(
                    measure=measure, value=st["iia" if measure == "stitched_iia" else measure],
                    baseline=st[baseline] if baseline else math.nan,
                    random_subspace=st[control] if control else math.nan))
    if not parts:
        return pd.DataFrame(columns=keys + ["measure", "value", "baseline", "random_subspace",
                                            "time_limited"])
    df = pd.concat(parts, ignore_index=True)
    for col in ("run", "other_run"):
        df[col] = df[col].map(lambda p: labels.get(Path(str(p)).name, str(p)))
    df["k"] = df["k"].astype(int)
    df["time_limited"] = df["run"].map(guarded).fillna(False) | df["other_run"].map(guarded).fillna(False)
    return df.sort_values(keys + ["measure"], kind="stable").reset_index(drop=True)


def phases_table(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        curves = accuracy_curves(r)
        overall = curves[curves["stratum"] == "all"]
        if overall.empty:
            continue
        ph = detect(overall["step"], overall["accuracy"])
        starts = (int(overall["step"].min()), *ph.boundaries)
        for i, (level, start) in enumerate(zip(ph.levels, starts)):
            rows.append({"run": r.label, "split": eval_split(r), "phase": i + 1,
                         "level": level, "start_step": start,
                         "time_limited": bool(r.summary.get("time_limited"))})
    return pd.DataFrame(rows)


def shared_table(runs) -> pd.DataFrame:
    """`shared_stats` of every compared variable over the runs' stitching tables; a pair
    of architectures is time-limited where a run of either is."""
    columns = ["variable", "model", "other_model", "n_runs", "n_other_runs", "n_pairs", "k",
               *(f"{c}{end}" for c in STATS for end in ("", "_lo", "_hi")), "verdict",
               "time_limited"]
    df = cross_table(runs, COMPARE_STITCHING.name)
    needed = {"input_code_iia", "output_code_iia", "chance_iia", "matched_k", "val_iia"}
    if df is None or df.empty or not needed <= set(df.columns):
        return pd.DataFrame(columns=columns)
    df = with_receiver_control(df, runs)
    parts = [shared_stats(learnt_pairs(df[df["variable"] == v]))
             for v in dict.fromkeys(df["variable"])]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=columns)
    out = pd.concat(parts, ignore_index=True)
    guarded = {r.model for r in runs if r.summary.get("time_limited")}
    out["time_limited"] = out["model"].isin(guarded) | out["other_model"].isin(guarded)
    return out[columns].reset_index(drop=True)


def _chosen_per_run(runs) -> pd.DataFrame:
    """Per run, variable, trained alignment and k: the test IIA at the site with the best
    training IIA for that alignment and k (a run without both splits there is left out)."""
    picked = []
    for r in runs:
        das = r.final(DAS.name)
        if das is None:
            continue
        for (variable, alignment, k), g in das.groupby(["variable", "alignment", "k"]):
            if alignment not in trained():  # the untrained control is no alignment to pair
                continue
            train = g[g["split"] == "train"].dropna(subset=["iia"])
            test = g[g["split"] == "test"].dropna(subset=["iia"])
            if train.empty or test.empty:
                continue
            best = train.sort_values("iia", ascending=False, kind="stable").iloc[0]
            at = test[(test["site"] == best["site"]) & (test["layer"] == best["layer"])
                      & (test["position"] == best["position"])]
            if len(at):
                picked.append({"run": r.label, "model": r.model, "seed": getattr(r, "seed", None),
                               "variable": variable, "k": int(k), "alignment": alignment,
                               "site": best["site"], "layer": int(best["layer"]),
                               "position": str(best["position"]),
                               "iia": float(at["iia"].iloc[0]),
                               "time_limited": bool(r.summary.get("time_limited"))})
    return pd.DataFrame(picked)


RUN_GAPS_COLUMNS = ["run", "model", "seed", "variable", "k", "alignment", "reference", "site",
                    "layer", "position", "iia", "iia_reference", "gap", "time_limited"]


def run_gaps_table(runs, reference: str = REFERENCE) -> pd.DataFrame:
    """Per run, variable, k and trained alignment other than `reference`: its test IIA, the
    reference's on the same run and k (each at its own site chosen on training pairs) and the
    difference, as numbers: what `alignment_gaps` averages over runs."""
    df = _chosen_per_run(runs)
    if df.empty:
        return pd.DataFrame(columns=RUN_GAPS_COLUMNS)
    ref = df[df["alignment"] == reference].set_index(["run", "variable", "k"])["iia"]
    paired = np.array([(r, v, k) in ref.index
                       for r, v, k in zip(df["run"], df["variable"], df["k"])], dtype=bool)
    out = df[(df["alignment"] != reference).to_numpy() & paired]
    out = out.assign(reference=reference, iia_reference=[
        float(ref.loc[(r, v, k)]) for r, v, k in zip(out["run"], out["variable"], out["k"])])
    out["gap"] = out["iia"] - out["iia_reference"]
    return out[RUN_GAPS_COLUMNS].sort_values(["model", "variable", "k", "alignment", "run"],
                                             kind="stable").reset_index(drop=True)


def alignment_gaps_table(runs, reference: str = REFERENCE, level: float = 0.95) -> pd.DataFrame:
    """Per (model, variable, k, trained alignment other than `reference`): the paired
    difference of test IIA (alignment − reference) over the runs that scored both, its mean
    and t interval over runs (none with one run); each run's difference is `run_gaps_table`'s
    row."""
    columns = ["model", "variable", "k", "alignment", "reference", "n_runs", "iia",
               "iia_reference", "gap", "gap_lo", "gap_hi", "time_limited"]
    per_run = run_gaps_table(runs, reference)
    rows = []
    for (model, variable, k, alignment), g in per_run.groupby(
            ["model", "variable", "k", "alignment"], sort=True):
        gap, gap_lo, gap_hi = t_interval(g["gap"].to_numpy(), level)
        rows.append({"model": model, "variable": variable, "k": int(k), "alignment": alignment,
                     "reference": reference, "n_runs": len(g), "iia": float(g["iia"].mean()),
                     "iia_reference": float(g["iia_reference"].mean()), "gap": gap,
                     "gap_lo": gap_lo, "gap_hi": gap_hi,
                     "time_limited": bool(g["time_limited"].any())})
    return pd.DataFrame(rows, columns=columns)


def das_curve_table(runs) -> pd.DataFrame:
    """Every test IIA of every run's DAS table: per run, variable, alignment (the untrained
    control included), site and k, with its interval and the pairs scored. The curve over k
    that `reproduce` compares, and the IIA at any site and k a rerun chose differently."""
    columns = ["run", "model", "seed", "variable", "alignment", "site", "layer", "position",
               "k", "iia", "iia_lo", "iia_hi", "n_tested", "time_limited"]
    parts = []
    for r in runs:
        das = r.final(DAS.name)
        if das is None:
            continue
        test = das[das["split"] == "test"].dropna(subset=["iia"])
        if test.empty:
            continue
        parts.append(pd.DataFrame({
            "run": r.label, "model": r.model, "seed": r.seed,
            "variable": test["variable"].to_numpy(), "alignment": test["alignment"].to_numpy(),
            "site": test["site"].to_numpy(), "layer": test["layer"].astype(int).to_numpy(),
            "position": test["position"].astype(str).to_numpy(),
            "k": test["k"].astype(int).to_numpy(), "iia": test["iia"].astype(float).to_numpy(),
            **{c: (test[c].astype(float).to_numpy() if c in test else math.nan)
               for c in ("iia_lo", "iia_hi")},
            "n_tested": test["n_tested"].to_numpy() if "n_tested" in test else math.nan,
            "time_limited": bool(r.summary.get("time_limited"))}))
    if not parts:
        return pd.DataFrame(columns=columns)
    df = pd.concat(parts, ignore_index=True)[columns]
    return df.sort_values(["run", "variable", "alignment", "site", "layer", "position", "k"],
                          kind="stable").reset_index(drop=True)


def emergence_table(runs) -> pd.DataFrame:
    """Every run's `emergence` rows (its latest analysed checkpoint's walk): per run,
    variable and scored step, the cell, k, the IIA and its interval, the shuffled control,
    the atlas's null, the pairs scored, and the step from which the variable stays above the
    null (`appears_at`, empty: never)."""
    from study.claims.emergence import appears_at, stacked_emergence
    columns = ["run", "model", "seed", "variable", "role", "site", "layer", "k", "step", "iia",
               "iia_lo", "iia_hi", "shuffled_iia", "null", "n_tested", "too_few", "appears_at",
               "time_limited"]
    rows = stacked_emergence(runs)
    if rows is None:
        return pd.DataFrame(columns=columns)
    seeds = {r.label: r.seed for r in runs}
    guard = _guarded(runs)
    first = appears_at(rows).set_index(["run", "variable"])["appears_at"]
    rows = rows.assign(seed=rows["run"].map(seeds), time_limited=rows["run"].map(guard),
                       appears_at=[first.get((r, v)) for r, v in zip(rows["run"],
                                                                     rows["variable"])])
    return rows[columns].sort_values(["run", "variable", "step"], kind="stable") \
        .reset_index(drop=True)


def result_tables(runs, comparisons: Path | None) -> dict[str, pd.DataFrame]:
    """Every table of `TABLES` from loaded, labelled runs (`study.claims.runs`) and the
    sweep's comparisons folder."""
    return {"summary": summary_table(runs), "verdicts": verdicts_table(runs),
            "das_best": das_best_table(runs), "comparisons": comparisons_table(runs, comparisons),
            "phases": phases_table(runs), "shared": shared_table(runs),
            "alignment_gaps": alignment_gaps_table(runs), "run_gaps": run_gaps_table(runs),
            "das_curve": das_curve_table(runs), "emergence": emergence_table(runs)}
