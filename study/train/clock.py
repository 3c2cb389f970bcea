"""The clocks of one training session: wall time since the run began (across resumptions),
time spent in training steps (evaluation and checkpoint writing excluded, so throughput is
the steps' own), and time since the last checkpoint or resume point."""
from __future__ import annotations

import time


class Clock:
    def __init__(self, wall_so_far: float = 0.0):
        now = time.monotonic()
        self.start = now - wall_so_far  # as if the run had never been interrupted
        self.mark = now  # start of the current stretch of training steps
        self.last_save = now

    def wall(self) -> float:
        return time.monotonic() - self.start

    def lap(self) -> float:
        """Seconds since the mark, and the mark moved to now."""
        now = time.monotonic()
        secs, self.mark = now - self.mark, now
        return secs

    def restart_lap(self) -> None:
        """Drop the time since the mark (it went to evaluation or saving, not to steps)."""
        self.mark = time.monotonic()

    def saved(self) -> None:
        self.last_save = time.monotonic()

    def over_budget(self, minutes: float) -> bool:
        """The run's wall time is past `minutes` (0 = no budget)."""
        return bool(minutes) and self.wall() > 60 * minutes

    def save_due(self, minutes: float) -> bool:
        """`minutes` have passed since the last save (0 = never due)."""
        return bool(minutes) and time.monotonic() - self.last_save > 60 * minutes
