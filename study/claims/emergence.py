"""When a variable appears along training, from the `emergence` tables
(`study/analyses/emergence/`), set beside the accuracy's phases (`phases.detect`): "gru's
resolved appears at update 900, before its accuracy leaves the plateau (phase boundary
1,200)" [ours; Wu et al. 2025 place the binding mechanism's appearance against the accuracy
phases of one transformer].

A variable appears at the first scored checkpoint from which its IIA's lower bound stays
above the null (the atlas's: the controls' maximum over the whole grid) at every later
scored checkpoint; a checkpoint with too few tested pairs breaks the run. Never, where the
last checkpoint's bound is not above it. Torch-free."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

KEYS = ("run", "variable")


def appears_at(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, variable) of `rows` (an `emergence` table with a `run` column, or
    several such stacked): `appears_at`, the step from which iia_lo stays above the null
    (NaN: never), and `final_step`, the latest step scored."""
    out = []
    for (run, variable), d in rows.groupby(list(KEYS), sort=False):
        d = d.sort_values("step", kind="stable")
        lo, null = (pd.to_numeric(d[c], errors="coerce") for c in ("iia_lo", "null"))
        above = ((~d["too_few"].astype(bool)) & (lo > null)).to_numpy()
        steps = d["step"].to_numpy()
        below = np.flatnonzero(~above)
        first = (float("nan") if len(steps) == 0 or not above[-1] else
                 int(steps[below[-1] + 1]) if len(below) else int(steps[0]))
        out.append({"run": run, "variable": variable, "appears_at": first,
                    "final_step": int(steps[-1]) if len(steps) else float("nan")})
    return pd.DataFrame(out, columns=[*KEYS, "appears_at", "final_step"])


def _n(step) -> str:
    return f"{int(step):,}"


def sentence(who: str, variable: str, appears, boundaries=()) -> str:
    """"gru's resolved appears at update 900, before its accuracy leaves the plateau (phase
    boundary 1,200)": `appears` (a step or NaN) set against the first of the accuracy's
    phase `boundaries` at or after it (or the last before it)."""
    head = f"{who}'s {variable}"
    if appears is None or (isinstance(appears, float) and math.isnan(appears)):
        return f"{head} never stays above the null"
    bounds = sorted(int(b) for b in boundaries)
    if not bounds:
        return (f"{head} appears at update {_n(appears)}; its accuracy shows no phase "
                f"boundary")
    later = [b for b in bounds if b > appears]
    same = [b for b in bounds if b == appears]
    if same:
        return (f"{head} appears at update {_n(appears)}, with its accuracy leaving the "
                f"plateau (phase boundary {_n(same[0])})")
    if later:
        return (f"{head} appears at update {_n(appears)}, before its accuracy leaves the "
                f"plateau (phase boundary {_n(later[0])})")
    return (f"{head} appears at update {_n(appears)}, after its accuracy left the plateau "
            f"(phase boundary {_n(bounds[-1])})")


def accuracy_boundaries(run) -> tuple[int, ...]:
    """The phase boundaries of a run's overall accuracy on its evaluation split
    (`phases.detect` on `curves.accuracy_curves`)."""
    from study.claims.curves import accuracy_curves
    from study.claims.phases import detect
    c = accuracy_curves(run)
    c = c[c["stratum"] == "all"]
    return detect(c["step"], c["accuracy"]).boundaries if len(c) else ()


def stacked_emergence(runs) -> pd.DataFrame | None:
    """Every run's `emergence` rows at its latest analysed checkpoint, with `run` (its label)
    and `model`; None where no run has the table."""
    parts = [df.assign(run=r.label, model=r.model) for r in runs
             if (df := r.final("emergence")) is not None]
    return pd.concat(parts, ignore_index=True) if parts else None


def timeline(runs) -> pd.DataFrame:
    """One row per run and variable of the runs' `emergence` tables: run, model, variable,
    appears_at, the accuracy's phase boundaries and the sentence that sets one against the
    other."""
    cols = ["run", "model", "variable", "appears_at", "boundaries", "sentence"]
    rows = stacked_emergence(runs)
    if rows is None:
        return pd.DataFrame(columns=cols)
    models = {r.label: r.model for r in runs}
    bounds = {r.label: accuracy_boundaries(r) for r in runs}
    out = appears_at(rows)
    out["model"] = out["run"].map(models)
    out["boundaries"] = [", ".join(_n(b) for b in bounds.get(r, ())) or "none"
                         for r in out["run"]]
    out["sentence"] = [sentence(run, v, a, bounds.get(run, ()))
                       for run, v, a in zip(out["run"], out["variable"], out["appears_at"])]
    return out[cols]
