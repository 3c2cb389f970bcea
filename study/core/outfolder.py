"""Where a command may write a folder of its own (`results out=`, `report out=`): a folder is
only ever replaced or written into by the code that made it, so `out=` must be absent, empty
or a folder of the kind the command writes; a run directory, a sweep's folder and any other
folder are refused in one line before anything is read or written (the rule `run_dir=`
follows, `study.core.placement.check`)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from study.core.errors import UsageError
from study.core.placement import is_run

SWEEP_RECORD = "sweep.json"  # what marks a sweep's folder (`study.sweep.plan.SWEEP_FILE`)
REPORT_MARKER = ".study-report"  # written into every report folder (`study.reports.write`)


def entries(folder: Path) -> list[str]:
    """The names in `folder`, leaving out the temporaries of interrupted atomic writes."""
    return sorted(p.name for p in folder.iterdir()
                  if not (p.name.startswith(".") and p.name.endswith(".tmp")))


def check_out(value, what: str, own: Callable[[Path], bool], key: str = "out") -> Path:
    """`key=value` as the folder a command writes `what` (e.g. "a result folder") into:
    absent, empty, or one that `own(folder)` recognises as such; else a one-line UsageError
    saying what the folder is. Returns the path."""
    path = Path(value).expanduser()
    try:
        place = path.resolve()
        if place.exists() and not place.is_dir():
            raise UsageError(f"{key}={value} is a file, not a folder; choose another {key}=")
        if not place.is_dir() or not entries(place):
            return path
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop
        reason = getattr(e, "strerror", None) or str(e)
        raise UsageError(f"{key}={value} cannot be used ({reason}); choose another {key}=") from None
    special = {Path("/"): "the root directory", Path.home().resolve(): "your home directory",
               Path.cwd().resolve(): "the current directory"}
    if place in special:
        raise UsageError(f"{key}={value} is {special[place]}; choose a folder of its own")
    if is_run(place):
        found = "is a run directory"
    elif (place / SWEEP_RECORD).is_file():
        found = f"is a sweep's folder (it holds {SWEEP_RECORD})"
    elif own(place):
        return path
    else:
        names = entries(place)
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        found = f"is not {what} (it holds {', '.join(names[:3])}{more})"
    raise UsageError(f"{key}={value} {found}; choose an empty or new folder, or {what} to "
                     f"replace; nothing was written")
