"""Reading run directories for reports: config, summary, metrics and the analyses' tables.

Reports read only what a run directory holds (never training or analysis code), so a report
can be built on a machine without torch from directories copied off a GPU box. A table from
an analysis that ran at several checkpoints keeps every checkpoint; `RunTables.final` picks
the latest one, which is what the charts show. The application's run handle
(`study.open_run`) opens a run directory through `run_path` and offers this view of it as
`.run_tables`.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from study.core.errors import UsageError
from study.core.rundir import RunDir

CONFIG = "config.json"


@dataclass
class RunTables:
    """One run directory as reports read it: its records and tables, no network."""

    path: Path
    config: dict
    summary: dict
    status: str
    metrics: pd.DataFrame | None  # step, split, stratum, metric, value
    heuristics: pd.DataFrame | None  # heuristic, stratum, value, accuracy, n
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # analysis table name -> rows
    label: str = ""  # unique, short name in charts: "<model> s<seed>" (+ dir name on clashes)
    reference: pd.DataFrame | None = None  # source, step, split, accuracy: a published run

    @property
    def task(self) -> str:
        return str(self.config.get("task", "?"))

    @property
    def model(self) -> str:
        return str(self.config.get("model", "?"))

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def scale(self) -> str:
        return str(self.config.get("scale", "?"))

    @property
    def name(self) -> str:
        return self.path.name

    def final(self, table: str) -> pd.DataFrame | None:
        """Rows of `table` at its latest analysed checkpoint (None if the table is absent)."""
        df = self.tables.get(table)
        if df is None or df.empty:
            return None
        if "checkpoint" in df.columns:
            df = df[df["checkpoint"] == df["checkpoint"].max()]
        return df.reset_index(drop=True)


def run_path(path: str | Path) -> Path:
    """`path` as a run directory's path; a path that is not one is a one-line UsageError."""
    p = Path(path)
    try:
        p.resolve(strict=True)
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        if isinstance(e, RuntimeError) or getattr(e, "errno", None) == errno.ELOOP:
            raise UsageError(f"RUN_DIR {str(path)!r} cannot be opened "
                             f"({os.strerror(errno.ELOOP)}); give a run directory") from None
    if not p.is_dir():
        raise UsageError(f"RUN_DIR {str(path)!r} is not a run directory (it does not exist or is "
                         f"not a directory)")
    if not (p / CONFIG).is_file():
        raise UsageError(f"RUN_DIR {str(path)!r} is not a run directory (it has no {CONFIG}); "
                         f"give directories written by `python -m study run`")
    return p


def load_run(path: str | Path) -> RunTables:
    """Load one run directory; a path that is not one is a one-line UsageError."""
    p = run_path(path)
    config = _json(p / CONFIG, required=True)
    summary = _json(p / "summary.json", fix="re-run the same `run` command to rewrite it") or {}
    try:  # status.json is informational; a damaged one reads as unknown
        status = (_json(p / "status.json") or {}).get("status", "unknown")
    except UsageError:
        status = "unknown"
    tables: dict[str, pd.DataFrame] = {}
    for f in sorted((p / "analyses").glob("*/*.parquet")):
        if not f.parent.name.startswith("."):  # an analysis being written (or killed) aside
            tables[f.stem] = _parquet(f)
    return RunTables(path=p, config=config, summary=summary, status=str(status),
               metrics=_parquet(p / "metrics.parquet", optional=True),
               heuristics=_parquet(p / "heuristics.parquet", optional=True),
               reference=_parquet(p / "reference.parquet", optional=True), tables=tables)


def load_runs(paths) -> list[RunTables]:
    """Load several run directories (each once) and give them unique chart labels."""
    if not paths:
        raise UsageError("report needs at least one RUN_DIR")
    return labelled([load_run(path) for path in unique_paths(paths)])


def unique_paths(paths) -> list:
    """`paths` in the order given, each directory once (however it is spelled)."""
    seen, out = set(), []
    for path in paths:
        try:
            key = Path(path).resolve()
        except (OSError, RuntimeError):  # a symlink loop: `run_path` says so when opened
            key = Path(path).absolute()
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out


def labelled(runs: list[RunTables]) -> list[RunTables]:
    """`runs`, each given its chart label: `<model> s<seed>`, made unique within each task
    (charts compare runs of one task)."""
    base = [(r.task, f"{r.model} s{r.seed}") for r in runs]
    for r, b in zip(runs, base):
        r.label = b[1] if base.count(b) == 1 else f"{b[1]} ({r.name})"
    return runs


def _json(path: Path, required: bool = False, fix: str = "") -> dict | None:
    """The JSON object at `path` of a run directory, read as every reader reads it
    (`study.core.rundir.RunDir.read_json`)."""
    fix = fix or "delete it and re-run the `run` command that made this run"
    return RunDir(path.parent).read_json(path.name, fix=fix, required=required)


def _advice(path: Path) -> str:
    """What rebuilds a damaged table: its analysis, the run command, or (metrics) training."""
    run = path.parent
    if path.parent.parent.name == "analyses":
        run, name = path.parent.parent.parent, path.parent.name
        return (f"re-run `python -m study analyze {run} analysis={name}` (the damaged file is "
                f"set aside and recomputed)")
    if path.name in ("heuristics.parquet", "reference.parquet"):
        return f"re-run the `run` command that made {run} ({path.name} is rebuilt from the task)"
    if path.name == "metrics.parquet":
        return "metrics.parquet is written by training: restore it, or retrain with force=true"
    return "the run directory is damaged"


def _parquet(path: Path, optional: bool = False) -> pd.DataFrame | None:
    if optional and not path.exists():
        return None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise UsageError(f"{path} cannot be read ({type(e).__name__}); {_advice(path)}") from None
