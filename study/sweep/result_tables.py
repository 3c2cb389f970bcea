"""A study's results as data: the tables `python -m study results SWEEP [out=DIR]` writes.

SWEEP is a sweep directory (holding `sweep.json`) or a study's name or file, as `status`
takes it. The command writes a small folder of tables, read from the sweep's finished runs
and its comparisons (no checkpoints), each a CSV with one row per measured value and its keys
first; the default folder is `results/<study>-<date>/` at the repository's root, where such
folders are committed:
the tables of `study.claims.results` (what each holds is said there), then a manifest.

Every table has a `time_limited` column: a run that the time guard stopped trained a network
the update budget did not decide, and is no study result. `manifest.json` says what made the
tables: the commit, the exact command, each run's settings, the versions of torch, numpy and
the other libraries, the machine (CPU or GPU model, threads), each run's wall time, and the
tolerance per table and column that `python -m study reproduce` holds a rerun to, measured
from the study's own variation (`study/sweep/tolerance.py`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from study.claims.results import TABLES, result_tables
from study.core.errors import UsageError

MANIFEST = "manifest.json"
RESULTS_ROOT = Path(__file__).resolve().parents[2] / "results"

# What a rerun must match, per table: key columns (strings, integer settings) always exactly;
# each numeric column to within `abs + rel * |committed|` when the rerun's build differs
# (another CPU, torch, device or thread count: floating-point sums then round differently, and
# training follows another path), and exactly on the same build, where training and the
# analyses are bit-identical on a CPU (one thread per run). The abs part is measured when the
# folder is written (`study/sweep/tolerance.py`: the range over the study's seeds, one
# evaluation interval for updates); these margins are its floor, where a study has one seed
# or its seeds agree [ours]: an accuracy to 0.02, an IIA or a similarity to 0.05.
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "summary": {"steps_done": (0, 0.25), "acc_*": (0.02, 0), "train_loss": (0, 0.5)},
    "verdicts": {"iia*": (0.05, 0), "random": (0.05, 0), "shuffled": (0.05, 0),
                 "step0": (0.05, 0), "chance": (0.05, 0), "confound_*": (0.05, 0),
                 "restart_sd": (0.05, 0), "seeds_*": (0.05, 0),
                 "acc_test": (0.02, 0), "n_seeds": (0, 0)},
    "das_best": {"iia*": (0.05, 0), "n_tested": (0, 0.2)},
    "comparisons": {"value": (0.05, 0), "baseline": (0.05, 0), "random_subspace": (0.05, 0)},
    "phases": {"level": (0.05, 0), "start_step": (0, 0.25)},
    "shared": {"*iia*": (0.05, 0), "over_*": (0.05, 0)},
    "alignment_gaps": {"iia*": (0.05, 0), "gap*": (0.05, 0)},
    "run_gaps": {"iia*": (0.05, 0), "gap": (0.05, 0)},
    "das_curve": {"iia*": (0.05, 0), "n_tested": (0, 0.2)},
    "emergence": {"iia*": (0.05, 0), "shuffled_iia": (0.05, 0), "null": (0.05, 0),
                  "n_tested": (0, 0.2), "appears_at": (0, 0.25)},
}
# numbers compared as keys (exactly, on any build): what the study asked, not what it measured
EXACT = {"seed", "steps", "step", "k", "layer", "position", "n_params", "phase", "too_few", "n_runs",
         "n_other_runs", "n_pairs",
         "time_limited"}


# --- reading and writing a result folder --------------------------------------------------

def write_table(df: pd.DataFrame, path: Path) -> None:
    df.to_csv(path, index=False, lineterminator="\n")


def read_table(folder: Path, name: str) -> pd.DataFrame:
    """A committed table; a missing or unreadable one is a one-line error naming it."""
    path = Path(folder) / f"{name}.csv"
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise UsageError(f"{path} is missing; a result folder holds {', '.join(TABLES)} "
                         f"and {MANIFEST} (python -m study results SWEEP out=DIR)") from None
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise UsageError(f"{path} is damaged ({' '.join(str(e).split())[:120]}); restore it "
                         f"from git") from None


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "argv" not in data:
            raise ValueError("no 'argv'")
        return data
    except FileNotFoundError:
        raise UsageError(f"{folder} holds no {MANIFEST}: not a result folder (python -m study "
                         f"results SWEEP out=DIR writes one)") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} is damaged ({e}); restore it from git") from None


def write_results(record: dict, out: Path) -> Path:
    """Write the result folder of a sweep's record (`sweep.json`) to `out`, whole or not at
    all; returns it. Every run must be finished."""
    from study.core.atomic import atomic_dir
    from study.claims.runs import labelled, load_runs
    from study.run import runstate
    from study.sweep.manifest import manifest
    from study.sweep.tolerance import measured_tolerances

    paths = [Path(r["path"]) for r in record["runs"]]
    unfinished = [str(p) for p in paths if runstate.state_of(p) != "done"]
    if unfinished:
        raise UsageError(f"{len(unfinished)} of {len(paths)} runs are not finished "
                         f"({', '.join(unfinished[:3])}{' ...' if len(unfinished) > 3 else ''}); "
                         f"finish the sweep first (re-run it), then write its results")
    runs = labelled(load_runs(paths))
    report_dir = Path(record.get("report_dir") or "")
    comparisons = report_dir / "comparisons" if record.get("report_dir") else None
    tables = result_tables(runs, comparisons)
    with atomic_dir(out) as tmp:
        for name, df in tables.items():
            write_table(df, tmp / f"{name}.csv")
        data = manifest(record, runs, tables, measured_tolerances(tables, TOLERANCES, runs))
        (tmp / MANIFEST).write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    return out


def default_out(name: str) -> Path:
    return RESULTS_ROOT / f"{Path(name).stem}-{time.strftime('%Y-%m-%d')}"
