"""Caption helpers of the cross-run sections: at which k and which sites the rows are, and the
runs' order (the tables themselves are read by `study.claims.cross`)."""
from __future__ import annotations

import pandas as pd

from study.claims.learnt import display_label


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
    """One caption sentence naming the site each run was read at (`compare.site`; at
    `atlas`, with its token role: "resid[1]@pair at rhs@3"), runs grouped by site."""
    if "site" not in df.columns or df.empty:
        return ""
    roles = df["role"] if "role" in df.columns else pd.Series("", index=df.index)
    where = df["site"].astype(str).where(roles.fillna("") == "",
                                         df["site"].astype(str) + " at " + roles.astype(str))
    by_site: dict[str, list[str]] = {}
    for run, site in pd.DataFrame({"run": df["run"], "site": where}).drop_duplicates(
            ).itertuples(index=False):
        by_site.setdefault(site, []).append(run)
    if len(by_site) == 1:
        return f" Every run is read at {next(iter(by_site))}."
    return " Sites read: " + "; ".join(f"{site} in {', '.join(runs)}"
                                       for site, runs in by_site.items()) + "."
