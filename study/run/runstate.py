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


def summary(counts, total: int) -> str:
    """The count of runs in each state: "2 done, 1 running, ... (of 5)"."""
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in STATES) + f" (of {total})"


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


SETTINGS = "settings.json"  # beside an analysis's tables: the settings they were made with


def recorded_settings(rd: RunDir, name: str) -> dict | None:
    """The settings analysis `name`'s tables were made with; None where none were recorded
    (tables written before the record existed) or the record is unreadable."""
    try:
        got = RunDir(rd.analysis_dir(name)).read_json(SETTINGS)
    except (OSError, UsageError):
        return None
    return got if isinstance(got, dict) else None


_UNSET = object()  # a setting absent from a record


def settings_change(rd: RunDir, name: str, settings: dict) -> str | None:
    """How `settings` (the asked ones that decide results, `RunConfig.analysis_settings`)
    differ from those analysis `name`'s tables were made with, e.g. "k: [1, 2, 4, 16] ->
    [1, 2, 4, 8, 16]"; None when they are the same or unrecorded. A recorded setting that
    is not asked (a runtime-only one, or one the code no longer has) changes nothing; an
    asked one the record lacks does."""
    old = recorded_settings(rd, name)
    if old is None:
        return None
    changed = [k for k in sorted(settings) if old.get(k, _UNSET) != settings[k]]
    return "; ".join(f"{k}: {old.get(k, '(unset)')} -> {settings[k]}" for k in changed) or None


def missing_outputs(rd: RunDir, name: str) -> list[str]:
    """The files analysis `name` must write (`study.core.tables.required_files`) that its
    folder lacks or holds unreadable; for an analysis without declared tables, ["*.parquet"]
    while it has no table at all."""
    from study.core.damage import readable
    from study.core.tables import required_files
    folder = rd.analysis_dir(name)
    need = required_files(name)
    if not need:
        return [] if any(folder.glob("*.parquet")) else ["*.parquet"]
    return [f for f in need if not (folder / f).is_file() or not readable(folder / f)]


def analysed(rd: RunDir, name: str, settings: dict | None = None) -> bool:
    """Analysis `name` has every table (and artefact) it writes, each readable, and, given
    `settings` (its asked settings, JSON-shaped), they were made with those settings
    (unrecorded settings count as the same). One missing or damaged file makes it not done:
    the analysis runs again whole."""
    if missing_outputs(rd, name):
        return False
    return settings is None or settings_change(rd, name, settings) is None


def complete(path, analyses=(), config_hash: str | None = None) -> bool:
    """Done, with a table of each of `analyses` (a sweep that asks for another analysis of a
    finished run still runs it), and, given `config_hash`, the run its directory's marker
    names (a folder holding another run is not this run finished). `analyses` is names, or
    name -> asked settings (`RunConfig.analysis_settings`): tables made with other settings
    are then not finished (a sweep whose das.k changed runs das again)."""
    rd = RunDir(path)
    if config_hash is not None and (rd.marker() or {}).get("hash") != config_hash:
        return False
    asked = analyses if isinstance(analyses, dict) else dict.fromkeys(analyses)
    return (state_of(path) == "done" and all(analysed(rd, a, s) for a, s in asked.items())
            and final_weights_readable(rd))


def final_weights_readable(rd: RunDir) -> bool:
    """Whether the newest logged checkpoint's weights open: a finished run whose final
    checkpoint is damaged is not finished (its `run` names the file and retrains it)."""
    from study.train import checkpoint as ckpt
    steps = ckpt.list_checkpoints(rd.path)
    if not steps:  # none to read (a run kept without weights): its status decides
        return True
    try:
        ckpt.check_weights(ckpt.checkpoints_dir(rd.path) / ckpt.dir_name(steps[-1]))
    except ckpt.CheckpointError:
        return False
    return True
