"""Where what the library says goes: the `study` logger.

Every module logs under `study` (`logging.getLogger(__name__)`: `study.run.runner`,
`study.train.loop`, ...). As a library it adds only a NullHandler, so a program that uses it
routes or silences it with the standard API: a handler of its own on `study` (or the root
logger), `logging.getLogger("study").setLevel(logging.WARNING)`, or `.disabled = True`.
The command line adds the terminal handler (`to_terminal`: level INFO, the message alone on
the current stderr), and a run adds its `run.log` (`study/core/runlog.py`).

Two marks on a record (`extra=`) say where it goes:
- `PROGRESS`: a periodic progress line; a terminal shows a bar instead, so there only the log
  keeps it (a stderr that is a file, a SLURM log, gets it too)
- `LOG_ONLY`: for the log alone (stage times, a failed run's traceback the terminal prints
  anyway)
and `STAMPED` asks the terminal to show the time first (the log shows it on every line).
"""
from __future__ import annotations

import logging
import sys
import time

NAME = "study"
PROGRESS = {"study_progress": True}
LOG_ONLY = {"study_log_only": True}
STAMPED = {"study_stamped": True}
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

logging.getLogger(NAME).addHandler(logging.NullHandler())

_last_line = [time.monotonic()]


def heard() -> None:
    """A line was written (terminal or run.log): the heartbeat (`study/core/progress.py`)
    stays quiet for a while."""
    _last_line[0] = time.monotonic()


def quiet_for() -> float:
    """Seconds since the last line written."""
    return time.monotonic() - _last_line[0]


def isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _TerminalFormat(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if getattr(record, "study_stamped", False):
            text = f"{time.strftime(TIME_FORMAT, time.localtime(record.created))} {text}"
        return text


class TerminalHandler(logging.StreamHandler):
    """The message alone, on whatever `sys.stderr` is when the line is written (a test or a
    tool may swap it). Stands aside (`aside`) while a run's log is that very file."""

    def __init__(self):
        super().__init__()
        self.aside = 0
        self.setFormatter(_TerminalFormat("%(message)s"))
        self.addFilter(self._shown)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # StreamHandler.__init__ sets it; stderr is looked up
        pass

    def _shown(self, record: logging.LogRecord) -> bool:
        if self.aside or getattr(record, "study_log_only", False):
            return False
        return not (getattr(record, "study_progress", False) and isatty(sys.stderr))

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        heard()

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], (OSError, ValueError)):
            return  # a closed or broken stderr: the line is lost, the command goes on
        super().handleError(record)


def to_terminal() -> TerminalHandler:
    """What the command line shows: every `study` line of level INFO and above on stderr
    (once, however often it is called; a level set before is kept)."""
    logger = logging.getLogger(NAME)
    handler = next((h for h in logger.handlers if isinstance(h, TerminalHandler)), None)
    if handler is None:
        handler = TerminalHandler()
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return handler


def terminals() -> list[TerminalHandler]:
    return [h for h in logging.getLogger(NAME).handlers if isinstance(h, TerminalHandler)]
