"""What reports write: the comparative report (`python -m study report RUN_DIR ...`, the end of
a sweep), from run directories or from runs already loaded, and the `report.html` every run
writes for itself."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from study.reports.build import build_report
from study.reports.html import render
from study.claims.runs import RunTables, load_runs
from study.core.atomic import new_folder
from study.core.errors import UsageError
from study.core.rundir import atomic_write_bytes


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
    report = build_report(runs)
    page = render(report)
    with new_folder(out):  # a failed write (a full disk) leaves no folder of its own behind
        if markdown:
            from study.reports.markdown import write_markdown
            write_markdown(report, out)
        path = out / "index.html"
        atomic_write_bytes(path, page.encode())
    return path


def write_run_report(run_dir: str | os.PathLike) -> Path:
    """The run's own report: `RUN_DIR/report.html` (HTML only)."""
    report = build_report(load_runs([run_dir]))
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
