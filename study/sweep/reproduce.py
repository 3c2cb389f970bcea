"""`python -m study reproduce RESULT_DIR [work=DIR]`: rerun a committed study from its
manifest and compare the new tables with the committed ones.

The manifest's command (`python -m study sweep ...`) runs again in a scratch folder (`work=`,
a new temporary folder by default) with this checkout's code, its result folder is written
there as `python -m study results` writes one, and each table is compared with the committed
one (`compare_table`): its keys (runs, variables, sites, verdicts, the numbers a study asks
for) exactly, its measured numbers exactly where the rerun's build (torch, numpy, device,
threads) is the manifest's, and within the manifest's tolerance per column where it is not.
One line per table says identical, within tolerance (the largest difference), or differs
(where); the exit status is 0 only when every table is identical or within tolerance.
"""
from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from study.core.errors import UsageError
from study.sweep.plan import find_sweep
from study.sweep.result_tables import EXACT, TABLES, read_manifest, read_table, write_results

ROOT = Path(__file__).resolve().parents[2]  # the checkout: study paths in manifests are relative to it


def _tolerance(tolerances: dict, column: str) -> tuple[float, float] | None:
    for pattern, tol in tolerances.items():
        if fnmatch.fnmatchcase(column, pattern):
            return (float(tol["abs"]), float(tol["rel"])) if isinstance(tol, dict) else tol
    return None


def _is_key(df: pd.DataFrame, column: str) -> bool:
    return column in EXACT or not pd.api.types.is_numeric_dtype(df[column]) \
        or pd.api.types.is_bool_dtype(df[column])


def compare_table(old: pd.DataFrame, new: pd.DataFrame, tolerances: dict,
                  exact: bool) -> tuple[bool, str]:
    """(agrees, what a reader is told) for a committed table `old` and its rerun `new`."""
    if list(old.columns) != list(new.columns):
        return False, f"differs: columns {list(new.columns)}, committed {list(old.columns)}"
    if len(old) != len(new):
        return False, f"differs: {len(new)} rows, committed {len(old)}"
    if old.empty:
        return True, "identical (no rows)"
    keys = [c for c in old.columns if _is_key(old, c)]
    old = old.sort_values(keys, kind="stable").reset_index(drop=True) if keys else old
    new = new.sort_values(keys, kind="stable").reset_index(drop=True) if keys else new
    for c in keys:
        same = (old[c].astype(str) == new[c].astype(str))
        if not same.all():
            i = int((~same).to_numpy().nonzero()[0][0])
            return False, f"differs: {c} is {new[c].iloc[i]!r} where the committed table has {old[c].iloc[i]!r}"
    worst, identical = None, True
    for c in (c for c in old.columns if c not in keys):
        a, b = old[c].astype(float).to_numpy(), new[c].astype(float).to_numpy()
        both_nan = pd.isna(a) & pd.isna(b)
        if (pd.isna(a) != pd.isna(b)).any():
            return False, f"differs: {c} is missing in one table where the other has a value"
        diff = abs(a - b)
        diff[both_nan] = 0.0
        if (diff == 0).all():
            continue
        identical = False
        tol = None if exact else _tolerance(tolerances, c)
        if tol is None:
            return False, (f"differs: {c} by up to {diff.max():.3g}"
                           + (" (the same build: expected identical)" if exact
                              else " (no tolerance: expected identical)"))
        bound = tol[0] + tol[1] * abs(a)
        bound[both_nan] = 0.0
        if (diff > bound + 1e-12).any():
            i = int((diff - bound).argmax())
            return False, f"differs: {c} by {diff[i]:.3g} (tolerance {bound[i]:.3g})"
        gap = float(diff.max())
        if worst is None or gap > worst[1]:
            worst = (c, gap, float(bound[int(diff.argmax())]))
    if identical:
        return True, "identical"
    return True, f"within tolerance (largest difference: {worst[0]} {worst[1]:.3g} <= {worst[2]:.3g})"


def _argv_here(argv: list[str]) -> list[str]:
    """The manifest's command with a study file named relative to the checkout made absolute
    (the rerun runs in the scratch folder)."""
    out = []
    for a in argv:
        key, sep, value = a.partition("=")
        if sep and key == "study" and not Path(value).is_absolute() and (ROOT / value).is_file():
            a = f"study={ROOT / value}"
        out.append(a)
    return out


def rerun(manifest: dict, work: Path) -> Path:
    """Run the manifest's command in `work`; returns the new sweep's folder."""
    argv = _argv_here(list(manifest["argv"]))
    if not argv or argv[0] != "sweep":
        raise UsageError(f"the manifest's command {manifest.get('command')!r} is not a sweep; "
                         f"reproduce reruns sweeps")
    log = work / "reproduce.log"
    print(f"rerunning: {manifest.get('command')} in {work} (log: {log})", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    threads = (manifest.get("build") or {}).get("threads") if isinstance(manifest.get("build"), dict) else None
    if isinstance(threads, int):  # the committed runs' torch threads (a run in the sweep's process)
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with open(log, "w") as f:
        # long=ok: the study ran once already; the rerun is asked for, whatever it costs
        extra = [] if any(a.startswith("long=") for a in argv) else ["long=ok"]
        r = subprocess.run([sys.executable, "-m", "study", *argv, *extra], cwd=work, env=env,
                           stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise UsageError(f"the rerun failed (exit {r.returncode}): {tail[0]}; see {log}")
    found = sorted(work.rglob("sweep.json"))
    if len(found) != 1:
        raise UsageError(f"the rerun left {len(found)} sweep records in {work}; expected one")
    return found[0].parent


def checked_manifest(folder: Path) -> dict:
    """The manifest of result folder `folder`, its shape checked (`argv` a list of strings,
    `tables` and `tolerances` objects, each tolerance {"abs": number, "rel": number}) and
    every table it lists read, before anything is rerun: a damaged one is a one-line
    UsageError naming the file and what is wrong."""
    manifest = read_manifest(folder)
    path = Path(folder) / "manifest.json"

    def damaged(what: str):
        return UsageError(f"{path} is damaged ({what}); restore it from git")

    argv = manifest.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise damaged("argv is not a list of strings")
    for key in ("command", "study"):
        if manifest.get(key) is not None and not isinstance(manifest[key], str):
            raise damaged(f"{key} is not a string")
    for key in ("tables", "tolerances", "build"):
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            raise damaged(f"{key} is not an object")
    for table, columns in (manifest.get("tolerances") or {}).items():
        if not isinstance(columns, dict):
            raise damaged(f"the tolerances of {table} are not an object")
        for column, tol in columns.items():
            if not (isinstance(tol, dict) and set(tol) == {"abs", "rel"} and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                    for v in tol.values())):
                raise damaged(f"the tolerance of {table}.{column} is not "
                              f'{{"abs": number, "rel": number}}')
    for table in manifest.get("tables") or {name: {} for name in TABLES}:
        if table in TABLES:
            read_table(folder, table)  # missing or unreadable: one line naming it
    return manifest


def reproduce(folder: Path, work: Path) -> bool:
    """Rerun the study of result folder `folder` in `work` and print a verdict per table;
    True when every table agrees."""
    manifest = checked_manifest(folder)
    work.mkdir(parents=True, exist_ok=True)
    sweep_dir = rerun(manifest, work)
    record, _ = find_sweep([str(sweep_dir)])
    new_folder = write_results(record, work / "results")
    new_manifest = read_manifest(new_folder)
    exact = new_manifest.get("build") == manifest.get("build")
    print(f"build: {'the same as' if exact else 'another than'} the committed one's "
          f"({'numbers must be identical' if exact else 'numbers within tolerance'})")
    ok = True
    listed = manifest.get("tables") or {name: {} for name in TABLES}
    for name in TABLES:
        if name not in listed:  # a folder made before the table existed
            print(f"{name}: not in the committed folder; not compared")
            continue
        agrees, what = compare_table(read_table(folder, name), read_table(new_folder, name),
                                     (manifest.get("tolerances") or {}).get(name, {}), exact)
        ok &= agrees
        print(f"{name}: {what}")
    print(f"reproduced: {'yes' if ok else 'no'} ({new_folder})")
    return ok


def cmd_reproduce(args):
    dirs = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    work = options.pop("work", None)
    if options or len(dirs) != 1:
        raise UsageError("usage: reproduce RESULT_DIR [work=DIR] (a result folder holding "
                         "manifest.json)")
    folder = Path(dirs[0])
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; give a result folder (results/<study>-<date>)")
    checked_manifest(folder)  # before anything runs
    if work is not None:
        w = Path(work)
        if w.exists() and (not w.is_dir() or any(w.iterdir())):
            raise UsageError(f"work={work} exists and is not an empty folder; choose a new one")
    w = Path(work) if work else Path(tempfile.mkdtemp(prefix="reproduce-"))
    return 0 if reproduce(folder, w) else 1
