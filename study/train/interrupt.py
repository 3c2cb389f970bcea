"""Ctrl-C during training: deferred to the end of the current step, so that the resume point
written then holds a consistent state."""
from __future__ import annotations

import signal
import threading


class DeferInterrupt:
    """A first Ctrl-C only raises a flag, checked between steps; a second one interrupts at
    once. Signal handlers can only be set from the main thread; elsewhere Ctrl-C is left as
    it is."""

    def __enter__(self) -> "DeferInterrupt":
        self.flag, self._old = False, None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.flag:
            raise KeyboardInterrupt
        self.flag = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
