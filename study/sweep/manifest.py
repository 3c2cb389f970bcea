"""A result folder's `manifest.json`: what made its tables, so that a reader can make them
again (`python -m study reproduce`) and knows which numbers to expect back exactly.

Read from the sweep's record (`sweep.json`: the command line, where it ran) and each run's
own files (`env.json`: commit, library versions, device; `config.json`: every setting;
`times.json`: the wall time of each session; `summary.json`: how training ended).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from study.run.env import cpu_model, environment


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _one_or_all(values: list):
    """The value every run shares, or the list of the runs' values where they differ."""
    distinct = [v for i, v in enumerate(values) if v not in values[:i]]
    return distinct[0] if len(distinct) == 1 else distinct


def wall_time_s(run_dir: Path) -> float | None:
    """A run's wall time: the sum of its sessions' stage times (`times.json`)."""
    sessions = _json(Path(run_dir) / "times.json").get("sessions") or []
    total = sum(float(s.get("total_s") or 0) for s in sessions)
    return round(total, 1) if sessions else None


def build_of(env: dict) -> dict:
    """What decides whether a rerun is bit-identical: the libraries, the device, the threads,
    the SIMD level of torch's CPU kernels (None in runs made before it was recorded)."""
    packages = env.get("packages") or {}
    device = env.get("device") or {}
    return {"python": env.get("python"), "torch": packages.get("torch"),
            "numpy": packages.get("numpy"), "device": device.get("device"),
            "device_name": device.get("name"), "threads": device.get("threads"),
            "cuda": device.get("cuda"), "cpu_capability": device.get("capability")}


def portable_argv(argv, cwd: str | None) -> list[str]:
    """The command line with a study file inside the checkout named relative to it, so that a
    rerun from another clone finds it (`study reproduce`)."""
    root = Path(__file__).resolve().parents[2]
    out = []
    for a in argv:
        key, sep, value = a.partition("=")
        if sep and key == "study" and value.endswith(".toml"):
            path = (Path(cwd or ".") / value).resolve()
            if path.is_relative_to(root):
                a = f"study={path.relative_to(root)}"
        out.append(a)
    return out


# How `python -m study reproduce` reads the tolerances, in the manifest beside them.
AGREEMENT = ("On the build recorded under 'build' every number must come back identical. On "
             "another, a number agrees within abs + rel * |committed| (per table and column, "
             "'basis' saying what the abs part was measured from: the range over the study's "
             "seeds, one evaluation interval, or the floor), or where its 95 % interval (an "
             "IIA's Wilson interval, a mean's over runs) overlaps the rerun's. Verdicts and "
             "the other words, runs, variables, alignments and settings must be identical. A "
             "choice between near ties (das_best's site and k, a verdict's 'where') is no key: "
             "where the rerun chose otherwise, its IIA at the committed choice (das_curve) is "
             "compared. Phases are paired run by run in order (see study/sweep/agreement.py).")


def manifest(record: dict, runs, tables: dict, tolerances: dict) -> dict:
    """The manifest of a result folder made from `record`'s runs (loaded, labelled), with
    the tolerance per table and column a rerun is held to: (abs, rel), or the measured
    {"abs", "rel", "basis"} (`study/sweep/tolerance.py`)."""
    envs = [_json(Path(r.path) / "env.json") for r in runs]
    argv = portable_argv(record.get("argv") or ["sweep", f"study={record.get('name', '?')}"],
                         record.get("cwd"))
    per_run = []
    for r, env in zip(runs, envs):
        s = r.summary
        per_run.append({
            "run": r.label, "directory": Path(r.path).name, "status": r.status,
            "args": next((e.get("args") for e in record["runs"]
                          if Path(e["path"]).name == Path(r.path).name), None),
            "wall_time_s": wall_time_s(r.path), "train_time_s": s.get("train_time_s"),
            "steps": s.get("steps"), "steps_done": s.get("steps_done"),
            "time_limited": bool(s.get("time_limited")),
            "device": (env.get("device") or {}), "config": r.config})
    walls = [p["wall_time_s"] for p in per_run if p["wall_time_s"] is not None]
    return {
        "study": record.get("name"),
        "made": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "sweep_started": record.get("created"),
        "commit": _one_or_all([e.get("git_sha") for e in envs]),
        "command": "python -m study " + " ".join(argv),
        "argv": argv,
        "versions": _one_or_all([{**(e.get("packages") or {}), "python": e.get("python")}
                                 for e in envs]),
        "build": _one_or_all([build_of(e) for e in envs]),
        "machine": {"platform": _one_or_all([e.get("platform") for e in envs]),
                    "cpu": cpu_model() if envs and envs[0].get("platform") ==
                    environment().get("platform") else None,
                    "devices": _one_or_all([e.get("device") for e in envs])},
        "wall_time_s": {"runs": round(sum(walls), 1), "longest_run": max(walls, default=None)},
        "time_limited": [p["run"] for p in per_run if p["time_limited"]],
        "tables": {name: {"file": f"{name}.csv", "rows": int(len(df))}
                   for name, df in tables.items()},
        "tolerances": {name: {col: (tol if isinstance(tol, dict) else {"abs": tol[0], "rel": tol[1]})
                              for col, tol in cols.items()}
                       for name, cols in tolerances.items()},
        "agreement": AGREEMENT,
        "runs": per_run,
    }
