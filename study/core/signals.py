"""Stop signals: Ctrl-C, a scheduler's SIGTERM and SLURM's pre-timeout warning (`--signal`,
SIGUSR1 by default; SIGUSR2 too) all stop a run the same way.

`Interrupted` is a KeyboardInterrupt that remembers which signal asked to stop, so every
`except KeyboardInterrupt` path (resume point, status, claim release) handles them alike and
the command line can exit with the shell's convention, 128 + the signal's number (130 for
Ctrl-C, 143 for SIGTERM, 138 for SIGUSR1, 140 for SIGUSR2). Outside training a stop signal
raises at once (`raising_on_stop_signals`); training defers it to the end of the current step
(`study/train/interrupt.py`).
"""
from __future__ import annotations

import contextlib
import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal; `signum` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        self.signum = int(signum)
        super().__init__(signal_name(self.signum))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signum_of(exc: BaseException) -> int:
    """The signal behind a KeyboardInterrupt (a plain one is Ctrl-C)."""
    return getattr(exc, "signum", int(signal.SIGINT))


def exit_code(exc: BaseException) -> int:
    """The shell's exit status for a process stopped by the signal behind `exc`."""
    return 128 + signum_of(exc)


def _raise(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def raising_on_stop_signals():
    """SIGTERM, SIGUSR1 and SIGUSR2 raise `Interrupted` inside the block, as Ctrl-C raises
    KeyboardInterrupt (their default would kill the process with no status written and no
    claim released). Only the main thread can set handlers; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise) for s in STOP_SIGNALS if s != signal.SIGINT}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
