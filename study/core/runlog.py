"""`run.log`: every run directory keeps what its run said, each line with its time.

While a run (or an `analyze` session) holds its directory, `kept(RUN_DIR / "run.log")`
appends every record of the `study` logger to that file (so a resumed run adds its sessions),
progress lines and stage times included. When stderr already *is* that file (a launcher
started the run with its output there), the terminal handler stands aside for the block, so
no line is written twice. A log that cannot be written never stops a run.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

from study.core.logs import NAME, TIME_FORMAT, heard, terminals


class RunLogHandler(logging.FileHandler):
    """Appends `TIME message` lines to a run's log."""

    def __init__(self, path: Path):
        super().__init__(path, mode="a", encoding="utf-8", errors="replace")
        self.setFormatter(logging.Formatter("%(asctime)s %(message)s", TIME_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        heard()

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # a full disk or a vanished folder: the run goes on without its log


def _is_file(stream, path: Path) -> bool:
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def active() -> RunLogHandler | None:
    return next((h for h in logging.getLogger(NAME).handlers if isinstance(h, RunLogHandler)), None)


@contextlib.contextmanager
def kept(path):
    """Append the `study` logger's records to `path` for the block (entered again inside
    itself, as `analyze` inside `run`: the outer log goes on)."""
    path = Path(path)
    if active() is not None:
        yield
        return
    try:
        handler = RunLogHandler(path)
    except OSError:
        yield
        return
    logger = logging.getLogger(NAME)
    aside = terminals() if _is_file(sys.stderr, path) else []
    logger.addHandler(handler)
    for t in aside:
        t.aside += 1
    try:
        yield
    finally:
        for t in aside:
            t.aside -= 1
        logger.removeHandler(handler)
        with contextlib.suppress(OSError, ValueError):
            handler.close()
