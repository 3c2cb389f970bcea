"""Report entry points: `python -m study report RUN_DIR ... [out=DIR]`, the comparative report
a sweep writes, and the `report.html` every run writes for itself."""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from study.reports.build import build_report
from study.reports.html import render
from study.reports.load import load_runs
from study.core.errors import UsageError
from study.core.rundir import atomic_write_bytes


def write_report(run_dirs, out: str | os.PathLike, markdown: bool = True) -> Path:
    """Write `out/index.html` (and `out/report.md` + PNGs); returns the HTML's path."""
    runs = load_runs(run_dirs)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"out={out} exists and is not a directory")
    report = build_report(runs)
    page = render(report)
    out.mkdir(parents=True, exist_ok=True)
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


def cmd_report(args: list[str]) -> int:
    from study.core.coerce import coerce
    from study.core.settings import split_dirs_and_args
    dirs, options = split_dirs_and_args(args)
    out = options.pop("out", None)
    markdown = coerce("markdown", options.pop("markdown", "true"), bool)
    if options:
        raise UsageError(f"report: unknown option {next(iter(options))!r}; usage: report "
                         f"RUN_DIR [RUN_DIR ...] [out=DIR] [markdown=true|false]")
    if not dirs:
        raise UsageError("report needs at least one RUN_DIR: report RUN_DIR [RUN_DIR ...] [out=DIR]")
    path = write_report(dirs, out or default_out(dirs), markdown=markdown)
    print(path)
    sys.stdout.flush()
    return 0
