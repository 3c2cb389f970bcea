"""What a long stage leaves in the log: its wall time when it ends, and a line at least every
`EVERY_S` while it runs.

- `timed("analysis das", log)`: the stage; when it ends, `time: analysis das 3m12s`; while
  it runs, a heartbeat thread writes `analysis das: running for 1m30s` whenever nothing was
  logged for `EVERY_S` (training's progress lines, a bar's counts and any other line count
  as something). Both go to the log alone: the terminal shows what it showed before.
- `stage_times(log)`: a session (a run, an `analyze` command) collecting its stages' times;
  at its end one line sums them: `time: total 4m02s (data 0.4 s, training 3m10s, ...)`.
- `tqdm`: a tqdm bar that also logs its count every `EVERY_S` as a progress line, so a bar's
  progress reaches `run.log` and a stderr that is not a terminal (where the bar itself is
  off): `das 120/480 alignment (25%), 1m30s, ETA 4m30s`; a bar that logged a count logs
  its last one when it closes, so the log ends on what was done (`das 480/480 alignment
  (100%), 6m02s`), not on an earlier count and its ETA.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time

from tqdm.auto import tqdm as _tqdm

from study.core.logs import LOG_ONLY, PROGRESS, quiet_for

EVERY_S = 30.0
_log = logging.getLogger(__name__)
_sessions: list[list[tuple[str, float]]] = []  # stage times of the open sessions
_stages: list[object] = []  # the open stages, innermost last: only it beats


def duration(secs: float) -> str:
    """0.4 s, 42 s, 3m10s, 1h05m."""
    if secs < 10:
        return f"{secs:.1f} s"
    secs = int(round(secs))
    if secs < 60:
        return f"{secs} s"
    if secs < 3600:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs // 3600}h{secs % 3600 // 60:02d}m"


class _Heartbeat(threading.Thread):
    def __init__(self, name: str, log: logging.Logger):
        super().__init__(daemon=True, name=f"heartbeat {name}")
        self.stage, self.log, self.t0 = name, log, time.monotonic()
        self.done = threading.Event()

    def quiet(self) -> float:
        """Seconds since the last line, or since the stage began if that is later."""
        return min(quiet_for(), time.monotonic() - self.t0)

    def run(self) -> None:
        while not self.done.wait(max(0.05, EVERY_S - self.quiet())):
            if self.quiet() >= EVERY_S and _stages and _stages[-1] is self:
                self.log.info(f"{self.stage}: running for {duration(time.monotonic() - self.t0)}",
                              extra=LOG_ONLY)


@contextlib.contextmanager
def timed(name: str, log: logging.Logger = _log):
    """Time the block as stage `name` (see the module's docstring)."""
    beat = _Heartbeat(name, log)
    _stages.append(beat)
    beat.start()
    how = ""
    try:
        yield
    except KeyboardInterrupt:
        how = " (interrupted)"
        raise
    except BaseException:
        how = " (failed)"
        raise
    finally:
        secs = time.monotonic() - beat.t0
        beat.done.set()
        _stages.remove(beat)
        beat.join(timeout=1.0)
        if _sessions:
            _sessions[-1].append((name, secs))
        log.info(f"time: {name} {duration(secs)}{how}", extra=LOG_ONLY)


@contextlib.contextmanager
def stage_times(log: logging.Logger = _log):
    """Collect the times of the stages run in the block; log their sum when it ends."""
    times: list[tuple[str, float]] = []
    _sessions.append(times)
    try:
        yield times
    finally:
        _sessions.remove(times)
        if times:
            parts = ", ".join(f"{n} {duration(s)}" for n, s in times)
            log.info(f"time: total {duration(sum(s for _, s in times))} ({parts})", extra=LOG_ONLY)


class tqdm(_tqdm):
    """`tqdm.auto.tqdm` that also logs its count every `EVERY_S` (keyword `log=` picks the
    logger); drawn, or not, exactly as tqdm would."""

    def __init__(self, *args, log: logging.Logger | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        iterable = args[0] if args else kwargs.get("iterable")
        total = kwargs.get("total")
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self._say = log or _log
        self._what = kwargs.get("desc") or "progress"
        self._of, self._unit = total, kwargs.get("unit", "it")
        self._count = self._start = kwargs.get("initial", 0)
        self._t0 = self._last = time.monotonic()
        self._logged = None  # the count last logged

    def update(self, n=1):
        shown = super().update(n)
        self._tick(n)
        return shown

    def __iter__(self):
        for item in super().__iter__():
            yield item
            self._tick(1)

    def _tick(self, n) -> None:
        self._count += n
        now = time.monotonic()
        if now - self._last >= EVERY_S:
            self._last = now
            self._logged = self._count
            self._say.info(self._line(now), extra=PROGRESS)

    def close(self):
        if getattr(self, "_logged", None) is not None and self._logged != self._count:
            self._logged = self._count
            self._say.info(self._line(time.monotonic()), extra=PROGRESS)
        super().close()

    def _line(self, now: float) -> str:
        spent = now - self._t0
        of = f"/{self._of}" if self._of else ""
        pct = f" ({100 * self._count / self._of:.0f}%)" if self._of else ""
        done = self._count - self._start
        eta = (f", ETA {duration((self._of - self._count) * spent / done)}"
               if self._of and 0 < done and self._count < self._of else "")
        return f"{self._what} {self._count}{of} {self._unit}{pct}, {duration(spent)}{eta}"
