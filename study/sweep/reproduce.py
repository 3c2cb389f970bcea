"""`python -m study reproduce RESULT_DIR [work=DIR | against=DIR]`: rerun a committed study
from its manifest and compare the new tables with the committed ones.

The manifest's command (`python -m study sweep ...`) runs again in a scratch folder (`work=`,
a new temporary folder by default) with this checkout's code, its result folder is written
there as `python -m study results` writes one, and each table is compared with the committed
one (`study/sweep/agreement.py`): its keys and claims (runs, variables, sites, verdicts, the
numbers a study asks for) exactly, its measured numbers exactly where the rerun's build
(torch, numpy, device, threads) is the manifest's, and within the manifest's measured
tolerance per column where it is not; a choice between near ties (best k, best site) by the
IIA at the committed choice. `against=DIR` compares with a result folder made elsewhere (a
rerun on another machine) instead of rerunning. One line per table says identical, within
tolerance (the largest difference), or differs (where); the last line says
"reproduced: yes" or "no", and the exit status is 0 only for yes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from study.core.errors import UsageError
from study.sweep.plan import find_sweep
from study.sweep.agreement import compare_table, gaps_from_text, tolerance
from study.sweep.result_tables import TABLES, read_manifest, read_table, write_results

ROOT = Path(__file__).resolve().parents[2]  # the checkout: study paths in manifests are relative to it


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
    `tables` and `tolerances` objects, each tolerance with numbers "abs" and "rel", its
    "basis" beside them where it was measured) and
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
            if not (isinstance(tol, dict) and {"abs", "rel"} <= set(tol) and all(
                    isinstance(tol[v], (int, float)) and not isinstance(tol[v], bool)
                    and tol[v] >= 0 for v in ("abs", "rel"))):
                raise damaged(f"the tolerance of {table}.{column} is not "
                              f'{{"abs": number, "rel": number}}')
    for table in manifest.get("tables") or {name: {} for name in TABLES}:
        if table in TABLES:
            read_table(folder, table)  # missing or unreadable: one line naming it
    return manifest


def same_build(committed, new) -> bool:
    """Whether a rerun ran on the committed build: every part the committed manifest records
    (one made before the CPU kernels' SIMD level was recorded lacks it) is the rerun's."""
    if not isinstance(committed, dict) or not isinstance(new, dict):
        return committed == new
    return all(new.get(k) == v for k, v in committed.items())


def _legacy_gaps(old_gaps: pd.DataFrame, new_gaps: pd.DataFrame, tolerances: dict,
                 exact: bool) -> tuple[bool, str]:
    """A committed folder that held each run's gap as text (alignment_gaps' `gaps`) against the
    rerun's numbers (run_gaps), to the text's three decimals."""
    keys = ["model", "variable", "k", "alignment", "run"]
    old = gaps_from_text(old_gaps)
    both = old.merge(new_gaps[keys + ["gap"]], on=keys, how="outer", suffixes=("", "_new"),
                     indicator=True)
    if (both["_merge"] != "both").any():
        r = both[both["_merge"] != "both"].iloc[0]
        return False, f"differs: {r['run']} {r['alignment']} k={r['k']} in one table only"
    diff = (both["gap"] - both["gap_new"]).abs()
    tol = (0.0, 0.0) if exact else (tolerance(tolerances, "gap") or (0.0, 0.0))
    bound = tol[0] + tol[1] * both["gap"].abs() + 0.0005  # the text's rounding
    if (diff > bound).any():
        i = int((diff - bound).argmax())
        return False, (f"differs: {both['run'].iloc[i]} {both['alignment'].iloc[i]} "
                       f"k={both['k'].iloc[i]}: gap {both['gap_new'].iloc[i]:+.3f}, committed "
                       f"{both['gap'].iloc[i]:+.3f}")
    return True, (f"within tolerance (the committed gaps as text, largest difference "
                  f"{diff.max():.3g})" if diff.max() > 0.0005 else "identical (to the text's 3 decimals)")


def compare_folders(folder: Path, new_folder: Path) -> bool:
    """Print a verdict per table of committed result folder `folder` against `new_folder`;
    True when every table agrees."""
    manifest, new_manifest = read_manifest(folder), read_manifest(new_folder)
    exact = same_build(manifest.get("build"), new_manifest.get("build"))
    print(f"build: {'the same as' if exact else 'another than'} the committed one's "
          f"({'numbers must be identical' if exact else 'numbers within tolerance'})")
    listed = manifest.get("tables") or {name: {} for name in TABLES}
    tolerances = manifest.get("tolerances") or {}
    curve = read_table(new_folder, "das_curve") if "das_curve" in (
        new_manifest.get("tables") or {}) else None
    failed, anything_moved = [], False
    listed_new = new_manifest.get("tables") or {name: {} for name in TABLES}
    for name in TABLES:
        if name not in listed_new:  # a folder compared with, made before the table existed
            print(f"{name}: not in {new_folder}; not compared")
            continue
        if name == "run_gaps" and name not in listed and "alignment_gaps" in listed:
            old_gaps = read_table(folder, "alignment_gaps")
            if "gaps" in old_gaps.columns:
                agrees, what = _legacy_gaps(old_gaps, read_table(new_folder, name),
                                            tolerances.get("alignment_gaps", {}), exact)
                print(f"{name}: {what}")
                failed += [] if agrees else [name]
                anything_moved |= not what.startswith("identical")
                continue
        if name not in listed:  # a folder made before the table existed
            print(f"{name}: not in the committed folder; not compared")
            continue
        old, new = read_table(folder, name), read_table(new_folder, name)
        if name == "alignment_gaps" and "gaps" in old.columns and "gaps" not in new.columns:
            old = old.drop(columns="gaps")  # each run's gap, as text: compared under run_gaps
        agrees, what = compare_table(old, new, tolerances.get(name, {}), exact, name, curve)
        failed += [] if agrees else [name]
        anything_moved |= not what.startswith("identical")
        print(f"{name}: {what}")
    if failed:
        print(f"reproduced: no ({', '.join(failed)} differ{'s' if len(failed) == 1 else ''}); "
              f"compared with {new_folder}")
    else:
        print(f"reproduced: yes ({'within tolerance' if anything_moved else 'identical'}); "
              f"compared with {new_folder}")
    return not failed


def reproduce(folder: Path, work: Path) -> bool:
    """Rerun the study of result folder `folder` in `work` and print a verdict per table;
    True when every table agrees."""
    manifest = checked_manifest(folder)
    work.mkdir(parents=True, exist_ok=True)
    sweep_dir = rerun(manifest, work)
    record, _ = find_sweep([str(sweep_dir)])
    return compare_folders(folder, write_results(record, work / "results"))


def cmd_reproduce(args):
    dirs = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    work, against = options.pop("work", None), options.pop("against", None)
    if options or len(dirs) != 1 or (work and against):
        raise UsageError("usage: reproduce RESULT_DIR [work=DIR | against=RESULT_DIR] (a result "
                         "folder holding manifest.json; against= compares with a folder made "
                         "elsewhere instead of rerunning)")
    folder = Path(dirs[0])
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; give a result folder (results/<study>-<date>)")
    checked_manifest(folder)  # before anything runs
    if against is not None:
        if not Path(against).is_dir():
            raise UsageError(f"against={against} is not a folder; give a result folder "
                             f"(python -m study results SWEEP out=DIR writes one)")
        checked_manifest(Path(against))
        return 0 if compare_folders(folder, Path(against)) else 1
    if work is not None:
        w = Path(work)
        if w.exists() and (not w.is_dir() or any(w.iterdir())):
            raise UsageError(f"work={work} exists and is not an empty folder; choose a new one")
    w = Path(work) if work else Path(tempfile.mkdtemp(prefix="reproduce-"))
    return 0 if reproduce(folder, w) else 1
