"""Whether a rerun's table agrees with the committed one (`python -m study reproduce`).

A result reproduces when its claims do. Per table:

- **keys and claims** (runs, variables, alignments, settings, verdict words, every string
  column and the integer settings of `result_tables.EXACT`) must be identical;
- **measured numbers** must be identical on the same build, and on another within the
  manifest's tolerance (`abs + rel * |committed|`, `study/sweep/tolerance.py`), or, for a value
  written with its 95 % interval (`X_lo`, `X_hi`), where the two intervals overlap; the
  interval's bounds are not compared on their own;
- **a choice between near ties is no key**: `das_best`'s site and k (the best test IIA over
  sites and k) and a verdict's `where` (the k and site chosen on training pairs). Where the
  rerun chose otherwise, the rerun's IIA at the committed choice (from its `das_curve`) must
  agree with the committed IIA; the row's other numbers, measured at another choice, are not
  compared, and `das_curve` (the whole curve over k) is compared on its own;
- **phases are paired run by run**, in order: the committed plateaus and the rerun's are
  aligned as the longest common subsequence whose pairs agree in level and start step (within
  tolerance). They agree when each run's first and last plateaus pair up and every plateau
  left unpaired on either side lies between the levels of the paired plateaus around it, a
  step inside a climb both runs make (the detector may split one climb into two plateaus on
  one path and not on the other): a different number of phases does not fail by itself, a
  plateau at a level the other run never holds does.
"""
from __future__ import annotations

import fnmatch
import re

import numpy as np
import pandas as pd

from study.sweep.result_tables import EXACT

# per table: the columns that are a choice between near ties, not a key
CHOICES: dict[str, tuple[str, ...]] = {"das_best": ("site", "layer", "position", "k"),
                                       "verdicts": ("where",)}
# the interval of a value whose bounds are not named `X_lo`, `X_hi`
INTERVALS = {"seeds_iia": ("seeds_lo", "seeds_hi")}


def tolerance(tolerances: dict, column: str) -> tuple[float, float] | None:
    for pattern, tol in tolerances.items():
        if fnmatch.fnmatchcase(column, pattern):
            return (float(tol["abs"]), float(tol["rel"])) if isinstance(tol, dict) else tol
    return None


def is_key(df: pd.DataFrame, column: str) -> bool:
    return column in EXACT or not pd.api.types.is_numeric_dtype(df[column]) \
        or pd.api.types.is_bool_dtype(df[column])


def interval_of(columns, column: str) -> tuple[str, str] | None:
    lo, hi = INTERVALS.get(column, (f"{column}_lo", f"{column}_hi"))
    return (lo, hi) if lo in columns and hi in columns else None


def _bounds(columns) -> set[str]:
    return {b for c in columns for b in (interval_of(columns, c) or ())}


def _where_key(where: str) -> tuple[int, str] | None:
    """(k, site label) of a verdict's `where` ("k=16 state", "k=4 resid[1]")."""
    m = re.fullmatch(r"k=(\d+) (.+)", str(where))
    return (int(m.group(1)), m.group(2)) if m else None


def at_choice(curve: pd.DataFrame | None, row: pd.Series, table: str):
    """(iia, lo, hi) of the rerun's curve at the committed row's choice; None where the curve
    does not hold it."""
    if curve is None or curve.empty:
        return None
    from study.core.sites import site_label
    here = curve[(curve["run"] == row["run"]) & (curve["variable"] == row["variable"])
                 & (curve["alignment"] == row["alignment"])]
    if table == "das_best":
        for c in ("site", "layer", "k"):
            here = here[here[c].astype(str) == str(row[c])]
        here = here[here["position"].astype(str) == str(row["position"])]
    else:
        key = _where_key(row["where"])
        if key is None:
            return None
        labels = [site_label(s, l) for s, l in zip(here["site"], here["layer"])]
        here = here[(here["k"] == key[0]).to_numpy() & (np.array(labels) == key[1])]
    if here.empty:
        return None
    best = here.sort_values("iia", ascending=False, kind="stable").iloc[0]
    return float(best["iia"]), float(best["iia_lo"]), float(best["iia_hi"])


def _agree(a, b, bound, iv_old=None, iv_new=None):
    """Boolean array: |a − b| within bound, or the two intervals overlap."""
    ok = np.abs(a - b) <= bound + 1e-12
    ok |= pd.isna(a) & pd.isna(b)
    if iv_old is not None:
        overlap = (iv_old[0] <= iv_new[1]) & (iv_new[0] <= iv_old[1])
        ok |= np.nan_to_num(overlap.astype(float)).astype(bool)
    return ok


def compare_table(old: pd.DataFrame, new: pd.DataFrame, tolerances: dict, exact: bool,
                  table: str = "", curve: pd.DataFrame | None = None) -> tuple[bool, str]:
    """(agrees, what a reader is told) for a committed table `old` and its rerun `new` of
    result table `table`; `curve` is the rerun's das_curve, read where it chose another
    near tie."""
    if table == "phases":
        return compare_phases(old, new, tolerances, exact)
    if set(old.columns) != set(new.columns):
        return False, f"differs: columns {list(new.columns)}, committed {list(old.columns)}"
    new = new[list(old.columns)]
    if len(old) != len(new):
        return False, f"differs: {len(new)} rows, committed {len(old)}"
    if old.empty:
        return True, "identical (no rows)"
    choices = [c for c in CHOICES.get(table, ()) if c in old.columns]
    keys = [c for c in old.columns if is_key(old, c) and c not in choices]
    old = old.sort_values(keys, kind="stable").reset_index(drop=True) if keys else old
    new = new.sort_values(keys, kind="stable").reset_index(drop=True) if keys else new
    for c in keys:
        same = (old[c].astype(str) == new[c].astype(str))
        if not same.all():
            i = int((~same).to_numpy().nonzero()[0][0])
            who = f" ({old['run'].iloc[i]})" if "run" in old.columns and c != "run" else ""
            return False, f"differs: {c} is {new[c].iloc[i]!r} where the committed table has {old[c].iloc[i]!r}{who}"
    moved = np.zeros(len(old), dtype=bool)  # rows where the rerun chose another near tie
    for c in choices:
        moved |= (old[c].astype(str) != new[c].astype(str)).to_numpy()
    if exact and moved.any():
        i = int(moved.nonzero()[0][0])
        return False, (f"differs: {', '.join(choices)} chosen otherwise for {old['run'].iloc[i]} "
                       f"(the same build: expected identical)")
    notes = []
    for i in moved.nonzero()[0]:
        row = old.iloc[i]
        got = at_choice(curve, row, table)
        what = " ".join(f"{c}={new[c].iloc[i]}" for c in choices)
        was = " ".join(f"{c}={row[c]}" for c in choices)
        if got is None:
            return False, (f"differs: {row['run']} {row['alignment']} chose {what} where the "
                           f"committed table has {was}, and the rerun has no IIA there")
        tol = tolerance(tolerances, "iia") or (0.0, 0.0)
        iv_old = (np.array([row["iia_lo"]]), np.array([row["iia_hi"]]))
        if not _agree(np.array([row["iia"]]), np.array([got[0]]), tol[0] + tol[1] * abs(row["iia"]),
                      iv_old, (np.array([got[1]]), np.array([got[2]])))[0]:
            return False, (f"differs: {row['run']} {row['alignment']} at the committed {was}: "
                           f"IIA {got[0]:.3f} where the committed table has {row['iia']:.3f}")
        notes.append(f"{row['run']} {row['alignment']} chose {what} (committed {was}; "
                     f"IIA there {got[0]:.3f}, committed {row['iia']:.3f})")
    bounds = _bounds(old.columns)
    worst, identical = None, True
    for c in (c for c in old.columns if c not in keys and c not in choices):
        a = old[c].astype(float).to_numpy()[~moved]
        b = new[c].astype(float).to_numpy()[~moved]
        if (pd.isna(a) != pd.isna(b)).any():
            return False, f"differs: {c} is missing in one table where the other has a value"
        diff = np.abs(a - b)
        diff[pd.isna(a) & pd.isna(b)] = 0.0
        if (diff == 0).all():
            continue
        identical = False
        if c in bounds and not exact:
            continue  # an interval's bound moves with its value, which is compared
        tol = None if exact else tolerance(tolerances, c)
        if tol is None:
            return False, (f"differs: {c} by up to {diff.max():.3g}"
                           + (" (the same build: expected identical)" if exact
                              else " (no tolerance: expected identical)"))
        bound = tol[0] + tol[1] * np.abs(a)
        iv = interval_of(old.columns, c)
        ivs = ((old[iv[0]].astype(float).to_numpy()[~moved], old[iv[1]].astype(float).to_numpy()[~moved]),
               (new[iv[0]].astype(float).to_numpy()[~moved], new[iv[1]].astype(float).to_numpy()[~moved])) \
            if iv else (None, None)
        ok = _agree(a, b, bound, *ivs)
        if not ok.all():
            i = int(np.where(ok, -np.inf, diff - bound).argmax())
            run = old["run"].to_numpy()[~moved][i] if "run" in old.columns else ""
            return False, (f"differs: {c} by {diff[i]:.3g} (tolerance {bound[i]:.3g}"
                           f"{', the 95 % intervals apart' if iv else ''}){' at ' + run if run else ''}")
        within = diff <= bound + 1e-12  # the rest agree through their intervals
        if within.any():
            i = int(np.where(within, diff, -1).argmax())
            if worst is None or diff[i] > worst[1]:
                worst = (c, float(diff[i]), float(bound[i]))
    tail = f"; near ties chosen otherwise: {'; '.join(notes)}" if notes else ""
    if identical and not notes:
        return True, "identical"
    if worst is None or worst[1] == 0:
        return True, "within tolerance (within the 95 % intervals)" + tail
    return True, (f"within tolerance (largest difference: {worst[0]} {worst[1]:.3g} "
                  f"<= {worst[2]:.3g})" + tail)


# --- phases ------------------------------------------------------------------------------

def _pairs(old: pd.DataFrame, new: pd.DataFrame, fits) -> list[tuple[int, int]]:
    """The longest order-keeping pairing of rows of `old` with rows of `new` where fits(i, j)."""
    n, m = len(old), len(new)
    best = np.zeros((n + 1, m + 1), dtype=int)
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i, j] = max(best[i + 1, j], best[i, j + 1],
                             best[i + 1, j + 1] + 1 if fits(i, j) else 0)
    out, i, j = [], 0, 0
    while i < n and j < m:
        if fits(i, j) and best[i, j] == best[i + 1, j + 1] + 1:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1, j] >= best[i, j + 1]:
            i += 1
        else:
            j += 1
    return out


def _between(levels, paired: list[int], tol: float) -> list[int]:
    """The unpaired rows (of one side) whose level is not between the paired levels around it."""
    out = []
    for i in range(len(levels)):
        if i in paired:
            continue
        before = [p for p in paired if p < i]
        after = [p for p in paired if p > i]
        if not before or not after:
            out.append(i)
            continue
        lo, hi = sorted((levels[before[-1]], levels[after[0]]))
        if not lo - tol <= levels[i] <= hi + tol:
            out.append(i)
    return out


def compare_phases(old: pd.DataFrame, new: pd.DataFrame, tolerances: dict,
                   exact: bool) -> tuple[bool, str]:
    """The phases table, run by run (see the module's docstring)."""
    if exact:
        return compare_table(old, new, tolerances, exact=True, table="")
    lt = tolerance(tolerances, "level") or (0.0, 0.0)
    st = tolerance(tolerances, "start_step") or (0.0, 0.0)
    runs = list(dict.fromkeys(old["run"]))
    if set(runs) != set(new["run"]):
        return False, f"differs: runs {sorted(set(new['run']))}, committed {sorted(set(runs))}"
    notes, identical = [], len(old) == len(new)
    for run in runs:
        o = old[old["run"] == run].sort_values("phase").reset_index(drop=True)
        n = new[new["run"] == run].sort_values("phase").reset_index(drop=True)
        lo_, ln = o["level"].astype(float).to_numpy(), n["level"].astype(float).to_numpy()
        so, sn = o["start_step"].astype(float).to_numpy(), n["start_step"].astype(float).to_numpy()

        def fits(i, j):
            return (abs(lo_[i] - ln[j]) <= lt[0] + lt[1] * abs(lo_[i]) + 1e-12
                    and abs(so[i] - sn[j]) <= st[0] + st[1] * abs(so[i]) + 1e-12)
        pairs = _pairs(o, n, fits)
        po, pn = [p[0] for p in pairs], [p[1] for p in pairs]
        if not pairs or po[0] != 0 or pn[0] != 0 or po[-1] != len(o) - 1 or pn[-1] != len(n) - 1:
            return False, (f"differs: {run}'s {'first' if not pairs or po[0] or pn[0] else 'last'} "
                           f"plateau (levels {np.round(ln, 3).tolist()} from updates "
                           f"{sn.astype(int).tolist()}; committed {np.round(lo_, 3).tolist()} "
                           f"from {so.astype(int).tolist()})")
        stray = _between(lo_, po, lt[0]) + _between(ln, pn, lt[0])
        if stray:
            return False, (f"differs: {run} has a plateau the other path does not reach (levels "
                           f"{np.round(ln, 3).tolist()}; committed {np.round(lo_, 3).tolist()})")
        identical &= len(o) == len(n) and bool((lo_ == ln).all() and (so == sn).all())
        if len(o) != len(n):
            notes.append(f"{run}: {len(n)} phases, committed {len(o)}, paired {len(pairs)}")
    if identical:
        return True, "identical"
    return True, "within tolerance (phase by phase" + (f"; {'; '.join(notes)})" if notes else ")")


# --- folders written before run_gaps ------------------------------------------------------

def gaps_from_text(alignment_gaps: pd.DataFrame) -> pd.DataFrame:
    """(model, variable, k, alignment, run, gap) from a committed alignment_gaps table that
    held each run's gap as text ("gru s0: +0.079 gru s1: +0.110"), to three decimals."""
    rows = []
    for _, r in alignment_gaps.iterrows():
        for run, gap in re.findall(r"(.+?): ([+-]\d+\.\d+)\s*", str(r["gaps"])):
            rows.append({"model": r["model"], "variable": r["variable"], "k": int(r["k"]),
                         "alignment": r["alignment"], "run": run.strip(), "gap": float(gap)})
    return pd.DataFrame(rows, columns=["model", "variable", "k", "alignment", "run", "gap"])
