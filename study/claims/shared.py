"""What the architectures share: the table `shared` (per variable and ordered pair of
architectures, A into B, at the pairs' matched k) and each pair of runs' verdict.

Stitching A's aligned subspace into B's (`study.analyses.compare`) is set beside B's own
interchange, the two network-free codes written into B the same way (the input window and the
answer), the chance level and B's shuffled control; each is a mean over the pairs of runs
that both learnt the task with an interval from resampling runs (`study.claims.intervals`),
and the verdict follows the lower ends of the intervals of stitching minus each code
(`study.claims.rules.classify_interval`).
"""
from __future__ import annotations

import pandas as pd

from study.claims.intervals import by_architecture
from study.claims.rules import classify, classify_interval


REFUSED = "code not identifiable"


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df else pd.Series(float("nan"), index=df.index)


def refused_answer_code(df: pd.DataFrame) -> pd.Series:
    """(rows,) bool: the answer code was refused (its IIA NaN where its coverage of the changed
    test pairs was measured and too low, `study.analyses.compare.codes`): a refused code is not
    a code that scored 0."""
    return _column(df, "output_code_iia").isna() & _column(df, "output_code_coverage").notna()


def pair_verdicts(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (stitching rows, one per pair of runs, variable and k) with `verdict`: what each
    pair of runs' result is (`classify`), captured where both runs reach the validation bar
    (`k_bar`) at k; "code not identifiable" where the answer code was refused and the verdict
    would have rested on it (anything but "not captured" and "not shared")."""
    if df.empty or "k_bar" not in df.columns:
        return df
    captured = (df[["val_iia", "other_val_iia"]].min(axis=1) >= df["k_bar"])
    said = [classify(r.iia, r.input_code_iia, r.output_code_iia, r.chance_iia, bool(c),
                     r.margin, own_iia=o, confound_input=ci, confound_answer=ca)
            for r, c, o, ci, ca in zip(df.itertuples(index=False), captured,
                                       _column(df, "own_iia"), _column(df, "confound_input"),
                                       _column(df, "confound_answer"))]
    refused = refused_answer_code(df)
    return df.assign(verdict=[REFUSED if no and v not in ("not captured", "not shared") else v
                              for v, no in zip(said, refused)])


# stitching minus each control: the verdict follows the lower ends of their intervals
OVER = {"over_input": ("iia", "input_code_iia"), "over_output": ("iia", "output_code_iia"),
        "over_chance": ("iia", "chance_iia"), "over_own": ("iia", "own_iia")}
# the columns of `shared_stats`, each a mean with its interval over runs, and their names
STATS = {"iia": "stitched IIA", "own_iia": "B own IIA", "input_code_iia": "input code",
         "output_code_iia": "answer code", "chance_iia": "chance",
         "shuffled_iia": "B shuffled", "over_input": "stitched − input code",
         "over_output": "stitched − answer code"}


def shared_stats(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per ordered architecture pair at the matched k (`pairs`: `learnt_pairs` of one
    variable's stitching rows): model, other_model, n_runs, n_other_runs, n_pairs, k (the
    matched k, comma-separated where the pairs of runs differ), each of `STATS` as mean, _lo
    and _hi over runs (`by_architecture`), and the verdict. Only the pairs of runs in which
    both runs hold the variable at k (their own validation IIA reaches `k_bar`) enter the
    means [ours: a pair where A or B has no subspace for the variable says nothing of what
    they share]; an architecture pair with none is "not captured"."""
    at = pairs[pairs["k"] == pairs["matched_k"]]
    if "shuffled_iia" not in at.columns:
        at = at.assign(shuffled_iia=float("nan"))
    held = at[["val_iia", "other_val_iia"]].min(axis=1) >= at["k_bar"]
    cols = ["iia", "own_iia", "input_code_iia", "output_code_iia", "chance_iia", "shuffled_iia"]
    stats = by_architecture(at[held], cols, OVER) if held.any() else pd.DataFrame()
    done = set()
    rows = []
    for r in stats.to_dict("records"):
        g = at[held & (at["model"] == r["model"]) & (at["other_model"] == r["other_model"])]
        done.add((r["model"], r["other_model"]))
        margin = float(g["margin"].iloc[0])
        ks = sorted(set(int(k) for k in g["k"]))
        rows.append({"variable": g["variable"].iloc[0], "model": r["model"],
                     "other_model": r["other_model"], "n_runs": r["n_runs"],
                     "n_other_runs": r["n_other_runs"], "n_pairs": r["n_pairs"],
                     "k": ", ".join(map(str, ks)),
                     **{f"{c}{end}": r[f"{c}{end}"] for c in STATS for end in ("", "_lo", "_hi")},
                     "verdict": _verdict(r, True, margin, g)})
    for (a, b), g in at.groupby(["model", "other_model"], sort=False):
        if (a, b) not in done:  # no pair of runs in which both hold the variable
            rows.append({"variable": g["variable"].iloc[0], "model": a, "other_model": b,
                         "n_runs": g["run"].nunique(), "n_other_runs": g["other_run"].nunique(),
                         "n_pairs": int((g["run"] != g["other_run"]).sum()),
                         "k": ", ".join(map(str, sorted(set(int(k) for k in g["k"])))),
                         **{f"{c}{end}": float("nan") for c in STATS
                            for end in ("", "_lo", "_hi")},
                         "verdict": "not captured"})
    return pd.DataFrame(rows)


def _verdict(r: dict, captured: bool, margin: float, rows: pd.DataFrame) -> str:
    """`classify_interval` on the lower ends; where too few runs give no interval, on the
    means, and said so. The pairs' confound shares (`rows`' means) come first; a refused
    answer code in any pair of runs makes a verdict that would rest on it "code not
    identifiable"."""
    none = pd.isna(r["over_input_lo"])
    lo = lambda c: r[c] if none else r[c + "_lo"]  # noqa: E731
    said = classify_interval(lo("over_input"), lo("over_output"), lo("over_chance"),
                             r["input_code_iia"], r["output_code_iia"], captured, margin,
                             over_own=r["over_own"],
                             confound_input=float(_column(rows, "confound_input").mean()),
                             confound_answer=float(_column(rows, "confound_answer").mean()))
    if refused_answer_code(rows).any() and said not in ("not captured", "not shared"):
        return REFUSED
    return said + (" (means: too few runs for an interval)" if none and captured else "")
