"""Stop signals during training (Ctrl-C, SIGTERM, SIGUSR1, SIGUSR2): deferred to the end of the
current step, so that the resume point written then holds a consistent state."""
from __future__ import annotations

import signal
import threading

from study.core.signals import STOP_SIGNALS, Interrupted


class DeferInterrupt:
    """A first stop signal only records itself in `flag` (its number; 0 = none), checked
    between steps. A second Ctrl-C interrupts at once (a person insisting); a scheduler's
    signals arriving after the first (SLURM's pre-timeout warning reaching the run both from
    SLURM and from the launcher that forwards it, then SIGTERM at the time limit) wait for the
    step to end, since interrupting it would lose the resume point. Signal handlers can only
    be set from the main thread; elsewhere the signals are left as they are."""

    def __enter__(self) -> "DeferInterrupt":
        self.flag, self._old = 0, {}
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
        return self

    def _handler(self, signum, frame):
        if self.flag and signum == signal.SIGINT:
            raise Interrupted(signum)
        self.flag = self.flag or int(signum)

    def check(self) -> None:
        """Raise `Interrupted` if a stop signal arrived during the step just ended."""
        if self.flag:
            raise Interrupted(self.flag)

    def __exit__(self, *exc):
        for s, handler in self._old.items():
            signal.signal(s, handler)
