"""`run.log`: every run directory keeps what its run said on stderr.

While a run holds its directory, `mirrored(RUN_DIR / "run.log")` copies every line written to
`sys.stderr` into that file (appended, so a resumed run adds its sessions), except when stderr
already *is* that file (a launcher started the run with its output there). A terminal's
progress bar is not copied: it is drawn on `terminal()`, and the periodic progress lines meant
for the log go through `to_log()`.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path



class _Tee:
    """A text stream writing to `stream` and, line-buffered, to the log file."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        n = self.stream.write(text)
        with self._lock, contextlib.suppress(OSError, ValueError):
            self.log.write(text)
            if "\n" in text:
                self.log.flush()
        return n

    def flush(self) -> None:
        self.stream.flush()
        with self._lock, contextlib.suppress(OSError, ValueError):
            self.log.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding, ... of the real stream
        return getattr(self.stream, name)


def _is_file(stream, path: Path) -> bool:
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextlib.contextmanager
def mirrored(path):
    """Copy stderr into `path` for the block (a no-op when stderr is that file already, or when
    the block is entered again)."""
    path = Path(path)
    current = sys.stderr
    if isinstance(current, _Tee) or _is_file(current, path):
        yield
        return
    try:
        log = open(path, "a", encoding="utf-8", errors="replace")
    except OSError:  # a log that cannot be written never stops a run
        yield
        return
    tee = _Tee(current, log)
    sys.stderr = tee
    try:
        yield
    finally:
        if sys.stderr is tee:
            sys.stderr = current
        with contextlib.suppress(OSError, ValueError):
            log.close()


def copying() -> bool:
    """Whether stderr is being copied into a run's log."""
    return isinstance(sys.stderr, _Tee)


def terminal():
    """The stream under the copy: where a progress bar may draw."""
    stream = sys.stderr
    return stream.stream if isinstance(stream, _Tee) else stream


def to_log(text: str) -> None:
    """Write a line to the run's log only (nothing when no log is being kept or stderr is
    the terminal alone)."""
    stream = sys.stderr
    line = text if text.endswith("\n") else text + "\n"
    if isinstance(stream, _Tee):
        with stream._lock, contextlib.suppress(OSError, ValueError):
            stream.log.write(line)
            stream.log.flush()
    elif not _isatty(stream):
        stream.write(line)
        stream.flush()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
