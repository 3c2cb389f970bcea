"""What reports write: the comparative report (`python -m study report RUN_DIR ...`, the end of
a sweep), from run directories or from runs already loaded, and the `report.html` every run
writes for itself."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from pathlib import Path

from study.reports.build import Report, build_report
from study.reports.html import render
from study.claims.runs import RunTables, load_runs
from study.core.atomic import new_folder
from study.core.outfolder import REPORT_MARKER, entries
from study.core.errors import UsageError
from study.core.rundir import atomic_write_bytes

_log = logging.getLogger(__name__)


def write_report(run_dirs, out: str | os.PathLike, markdown: bool = True) -> Path:
    """Write the report of the run directories to `out/index.html` (and `out/report.md` +
    PNGs); returns the HTML's path."""
    return write_runs_report(load_runs(run_dirs), out, markdown)


def write_runs_report(runs: list[RunTables], out: str | os.PathLike,
                      markdown: bool = True) -> Path:
    """`write_report` of runs already loaded and labelled (`load.labelled`)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"out={out} exists and is not a directory")
    report = reportable(runs)
    page = render(report)
    with new_folder(out):  # a failed write (a full disk) leaves no folder of its own behind
        if markdown:
            from study.reports.markdown import write_markdown
            write_markdown(report, out)
        path = out / "index.html"
        atomic_write_bytes(path, page.encode())
        atomic_write_bytes(out / REPORT_MARKER, b"")  # `report out=` may write here again
    return path


REPORT_FILES = ("index.html", "report.md", "figures", "comparisons")  # what reports write


def is_report_folder(folder: Path, made_here: bool = False) -> bool:
    """A folder a report may be written into again: one a report wrote (its marker), one
    holding only `compare`'s tables, or (`made_here`: the folder's name is the command's
    default, not the user's) one holding only what reports write."""
    names = set(entries(folder))
    return (REPORT_MARKER in names or names <= {"comparisons"}
            or (made_here and names <= set(REPORT_FILES)))


def write_run_report(run_dir: str | os.PathLike) -> Path:
    """The run's own report: `RUN_DIR/report.html` (HTML only)."""
    report = reportable(load_runs([run_dir]))
    path = Path(run_dir) / "report.html"
    atomic_write_bytes(path, render(report).encode())
    return path


def default_out(run_dirs) -> Path:
    """One run: RUN_DIR/report; several: report-<hash8> beside them (same runs, same folder)."""
    paths = [Path(p) for p in run_dirs]
    if len(paths) == 1:
        return paths[0] / "report"
    key = "\n".join(sorted(str(p.resolve()) for p in paths))
    parent = Path(os.path.commonpath([p.resolve() for p in paths]))
    if parent in {p.resolve() for p in paths}:
        parent = parent.parent
    return parent / f"report-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def reportable(runs: list[RunTables]) -> Report:
    """The report of `runs`, leaving out what cannot be drawn: where a section fails on a
    run's tables (tables that disagree with each other or with their settings, written by
    another version or left half-replaced), that run's analysis whose tables make it fail
    is left out, one warning line naming its folder and the command that rebuilds it; a
    run that fails even without its analyses is left out whole. The other runs are
    reported as usual. A report of no run at all is a UsageError."""
    try:
        return build_report(runs)
    except Exception as e:  # noqa: BLE001 - a section meeting tables it cannot read
        first = e
    kept = []
    for run in runs:
        try:
            build_report([run])
            kept.append(run)
            continue
        except Exception as e:  # noqa: BLE001
            error = e
        for name in _analyses(run):
            trimmed = dataclasses.replace(run, tables={t: df for t, df in run.tables.items()
                                                       if t not in _analyses(run)[name]})
            try:
                build_report([trimmed])
            except Exception:  # noqa: BLE001
                continue
            _log.warning(f"warning: {run.path / 'analyses' / name} cannot be reported "
                         f"({_reason(error)}); left out of the report; re-run `python -m study "
                         f"analyze {run.path} analysis={name}` to rebuild it")
            kept.append(trimmed)
            break
        else:
            _log.warning(f"warning: {run.path} cannot be reported ({_reason(error)}); left out "
                         f"of the report")
    if not kept:
        raise UsageError(f"no run could be reported ({_reason(first)}); re-run the analyses "
                         f"of {', '.join(str(r.path) for r in runs)}")
    return build_report(kept)


def _analyses(run: RunTables) -> dict[str, set[str]]:
    """analysis folder name -> the names of the run's tables it holds."""
    out: dict[str, set[str]] = {}
    for f in sorted((run.path / "analyses").glob("*/*.parquet")):
        if f.stem in run.tables and not f.parent.name.startswith("."):
            out.setdefault(f.parent.name, set()).add(f.stem)
    return out


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
