"""Where a run of a sweep stands, read from its directory alone (so that any machine sharing
the file system can tell): done, running (a live process holds its claim, on this machine or
another), failed, interrupted (stopped by a signal, or its process vanished; re-running
resumes it) or pending (not started)."""
from __future__ import annotations

from pathlib import Path

from study.core.claim import CLAIM, describe, read_holder, stale_reason
from study.core.errors import UsageError
from study.core.rundir import RunDir

STATES = ("done", "running", "failed", "interrupted", "pending")


def holder(path) -> dict | None:
    """The live process holding the run directory's claim (None: nobody, or a stale claim)."""
    lock = Path(path) / CLAIM
    info = read_holder(lock)
    if info is None or stale_reason(lock, info) is not None:
        return None
    return info


def state_of(path) -> str:
    """One of STATES."""
    rd = RunDir(path)
    if holder(rd.path) is not None:
        return "running"
    if not (rd.path / "status.json").exists():
        return "pending"
    status = rd.status()
    if status in ("done", "failed", "interrupted"):
        return status
    if status == "running":  # no live claim: its process was killed
        return "interrupted"
    return "pending"  # created (or an unreadable status.json): nothing trained yet


def detail(path) -> str:
    """A few words on the state: who holds a running run, the error of a failed one."""
    info = holder(path)
    if info is not None:
        return f"held by {describe(info)}"
    try:
        status = RunDir(path).read_json("status.json")
    except (OSError, UsageError):  # a missing or damaged status says nothing more
        return ""
    return str(status.get("error", ""))[:200] if isinstance(status, dict) else ""


def complete(path, analyses=(), config_hash: str | None = None) -> bool:
    """Done, with a table of each of `analyses` (a sweep that asks for another analysis of a
    finished run still runs it), and, given `config_hash`, the run its directory's marker
    names (a folder holding another run is not this run finished)."""
    rd = RunDir(path)
    if config_hash is not None and (rd.marker() or {}).get("hash") != config_hash:
        return False
    return state_of(path) == "done" and all(any(rd.analysis_dir(a).glob("*.parquet")) for a in analyses)
