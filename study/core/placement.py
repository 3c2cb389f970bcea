"""Where a run directory may go, and what `force=true` may delete there.

A run writes into the folder `run_dir=` names and `force=true` clears it, so both are checked
before anything is written: `/`, the home directory, the current directory, an existing file,
a name the OS cannot hold, an unwritable folder and a non-empty folder that is not a run are
refused with one line. Clearing removes only what a run writes, never other files.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from study.core.errors import UsageError
from study.core.rundir import MARKER, RunDir

# Everything a run writes at its top level; `force=true` deletes these and nothing else.
RUN_FILES = ("config.json", "status.json", "metrics.parquet", "summary.json", "env.json",
             "heuristics.parquet", "report.html", "report.md", "run.log", "times.json", MARKER)
RUN_DIRS = ("checkpoints", "analyses", "figures")
KEEP_ON_CLEAR = (".study-claim", ".study-claim.takeover")  # the claim of the process doing the clearing


def _looks_like_run(rd: RunDir) -> bool:
    """A run directory made before runs carried a marker: a run-shaped config.json and a
    status.json (someone's own config.json alone does not qualify)."""
    import json
    try:
        cfg = json.loads(rd.config_path.read_text())
        status = json.loads((rd.path / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(cfg, dict) and all(k in cfg for k in ("task", "model", "seed", "train"))
            and isinstance(status, dict) and "status" in status)


def is_run(path) -> bool:
    rd = RunDir(path)
    return rd.is_marked() or _looks_like_run(rd)


def _foreign(path: Path) -> list[str]:
    """Entries of an existing folder that no run writes."""
    own = set(RUN_FILES) | set(RUN_DIRS) | set(KEEP_ON_CLEAR)
    return sorted(p.name for p in path.iterdir() if p.name not in own and not
                  (p.name.startswith(".") and p.name.endswith(".tmp")))


def check(path, what: str = "run_dir") -> Path:
    """Refuse a place no run may be written to (one-line UsageError); returns the path."""
    p = Path(path).expanduser()
    text = str(path)
    shown = text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"
    limit = _name_max(p)
    if any(len(part.encode()) > limit for part in p.parts) or len(os.fsencode(p)) > 4000:
        raise UsageError(f"{what}={shown} is too long for the file system (at most {limit} bytes "
                         f"per name); choose a shorter path")
    try:
        resolved = p.resolve()
    except OSError as e:
        raise UsageError(f"{what}={shown} cannot be used ({os.strerror(e.errno or errno.EINVAL)})") from None
    except RuntimeError:  # Python < 3.13 raises it for a symlink loop
        raise UsageError(f"{what}={shown} cannot be used ({os.strerror(errno.ELOOP)}); "
                         f"choose another {what}") from None
    special = {Path("/"): "the root directory", Path.home().resolve(): "your home directory",
               Path.cwd().resolve(): "the current directory"}
    if resolved in special:
        raise UsageError(f"{what}={shown} is {special[resolved]}; a run needs a folder of its own "
                         f"(e.g. runs/NAME)")
    if resolved.exists() and not resolved.is_dir():
        raise UsageError(f"{what}={shown} is an existing file, not a directory; choose another run_dir")
    if resolved.is_dir():
        foreign = _foreign(resolved)
        if foreign and not is_run(resolved):
            more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            raise UsageError(f"{what}={shown} is a non-empty folder that is not a run directory "
                             f"(it holds {', '.join(foreign[:3])}{more}); choose an empty or new folder")
    parent = resolved
    while not parent.exists():  # the nearest existing folder must let us create the rest
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what}={shown}: cannot write in {parent} (permission denied); "
                         f"choose a folder you can write to")
    return p


def _name_max(p: Path) -> int:
    probe = p if p.is_absolute() else Path.cwd()
    while not os.path.exists(probe):  # never raises, unlike Path.exists on an over-long name
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def left_by_clear(path) -> list[Path]:
    """What `clear` would leave that holds a run's files: a run folder (checkpoints/, ...)
    that is a symlink, which clearing never follows (it may point at someone's data)."""
    out = []
    for name in RUN_DIRS:
        link = Path(path) / name
        try:
            if link.is_symlink() and link.is_dir() and any(link.iterdir()):
                out.append(link)
        except OSError:
            out.append(link)
    return out


def clear(path) -> list[str]:
    """Delete what a run wrote in `path` (a marked run directory) and nothing else; returns
    the names removed. An unmarked folder is refused: it may be someone's data."""
    rd = RunDir(path)
    if not is_run(rd.path):
        raise UsageError(f"force=true refused: {rd.path} is not a run directory (no {MARKER}); "
                         f"nothing was deleted")
    removed = []
    for name in RUN_DIRS:
        if (rd.path / name).is_dir() and not (rd.path / name).is_symlink():
            shutil.rmtree(rd.path / name)
            removed.append(name)
    for name in RUN_FILES:
        target = rd.path / name
        if target.is_file() or target.is_symlink():
            target.unlink()
            removed.append(name)
    return removed
