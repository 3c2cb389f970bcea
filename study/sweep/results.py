"""`python -m study results SWEEP [out=DIR]`: a finished sweep's result folder (its tables and
manifest, `study/sweep/result_tables.py`), by default `results/<study>-<date>/`."""
from __future__ import annotations

from pathlib import Path

from study.core.errors import UsageError
from study.core.outfolder import check_out, entries
from study.sweep.plan import find_sweep
from study.sweep.result_tables import MANIFEST, default_out, write_results


def cmd_results(args):
    where = [a for a in args if "=" not in a or a.startswith("study=")]
    options = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("study="))
    out = options.pop("out", None)
    if options or len(where) != 1:
        raise UsageError("usage: results SWEEP_DIR|STUDY [out=DIR] (a finished sweep's folder, "
                         "or its study's name or file)")
    record, _ = find_sweep([where[0].removeprefix("study=")])
    _check_summaries(record)
    out_dir = Path(out) if out else default_out(record.get("name") or "sweep")
    check_out(out_dir, "a result folder", is_result_folder)  # replaced whole: checked first
    print(write_results(record, out_dir))
    return 0


def _check_summaries(record: dict) -> None:
    """A finished run without its summary.json would give an empty row: refused in one line."""
    from study.run import runstate
    for run in record["runs"]:
        path = Path(run["path"])
        if runstate.state_of(path) == "done" and not (path / "summary.json").is_file():
            raise UsageError(f"{path / 'summary.json'} is missing although the run finished; "
                             f"re-run the same `run` command (or the sweep) to rewrite it")


def is_result_folder(folder: Path) -> bool:
    """A result folder, which `results` may replace: its manifest and tables (CSV), nothing
    else."""
    names = entries(folder)
    return MANIFEST in names and all(
        (folder / n).is_file() and (n == MANIFEST or n.endswith(".csv")) for n in names)
