"""How a training run shows its progress: a bar on a terminal (steps, and at each log row the
training loss, the newest evaluation's accuracy and tokens per second), and, every
`runtime.progress_seconds`, a plain line a log file keeps (a SLURM log, `run.log`):

    counting/gru step 1200/3000 (40%) loss 0.4121 val acc 0.873 (step 1000) tokens/s 2.1e+04 ETA 3m10s

The loss is the training loss of the latest updates; the accuracy is the share of the
validation split answered right (every scored position; `study/core/outputs.py`) at the
latest evaluation, whose step it names: evaluations come at the checkpoints (log-spaced,
dense early) and every `train.eval_every` updates, so a low accuracy beside a low loss is an
evaluation made before the network learned, not a disagreement.

The lines are progress records of the `study.train.progress` logger (`study/core/logs.py`):
`run.log` keeps them, and stderr shows them when it is not a terminal (on a terminal the bar
shows the same)."""
from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

from study.core.logs import PROGRESS, isatty

_log = logging.getLogger(__name__)


class Progress:
    def __init__(self, total: int, initial: int, task: str, model: str, every_s: float = 30.0):
        self.total, self.initial, self.name, self.every_s = total, initial, f"{task}/{model}", every_s
        screen = sys.stderr
        self.tty = isatty(screen)
        self.bar = tqdm(total=total, initial=initial, disable=not self.tty, desc=self.name,
                        file=screen, unit="step", dynamic_ncols=True, smoothing=0.05)
        self.t0 = self.last = time.monotonic()
        self.step = initial
        self.line = ""
        self.acc_step: int | None = None  # the step of the accuracy shown (None: before this session)

    def show(self, step: int, loss: float, acc: dict[str, float], tokens_per_s: float) -> None:
        if self.tty:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.4f}", acc=_fmt_acc(acc), tok_s=f"{tokens_per_s:.3g}")
        self.step, self._loss, self._tokens_per_s = step, loss, tokens_per_s
        self.line = f"loss {loss:.4f} {self._acc(acc)} tokens/s {tokens_per_s:.3g}"
        now = time.monotonic()
        if self.every_s and now - self.last >= self.every_s:
            self.last = now
            self._emit(f"{self.name} step {step}/{self.total} ({100 * step / self.total:.0f}%) "
                       f"{self.line} ETA {self.eta(now)}")

    def evaluated(self, acc: dict[str, float], step: int | None = None) -> None:
        """An evaluation at `step` just ended: the next line (the last one, at the end of
        training) shows its accuracy, not the one before it."""
        self.acc_step = step
        if not self.line:
            return
        if self.tty:
            self.bar.set_postfix(loss=f"{self._loss:.4f}", acc=_fmt_acc(acc),
                                 tok_s=f"{self._tokens_per_s:.3g}")
        self.line = f"loss {self._loss:.4f} {self._acc(acc)} tokens/s {self._tokens_per_s:.3g}"

    def _acc(self, acc: dict[str, float]) -> str:
        """"val acc 0.873 (step 1000)": the latest evaluation's accuracy and its step."""
        key = "val" if "val" in acc else next(iter(acc), "val")
        at = f" (step {self.acc_step})" if acc and self.acc_step is not None else ""
        return f"{key} acc {_fmt_acc(acc)}{at}"

    def eta(self, now: float) -> str:
        """Time left at this session's pace."""
        done = self.step - self.initial
        if done <= 0:
            return "?"
        return _fmt_secs((self.total - self.step) * (now - self.t0) / done)

    def _emit(self, line: str) -> None:
        _log.info(line, extra=PROGRESS)

    def close(self) -> None:
        self.bar.close()
        if self.every_s and self.line:
            self._emit(f"{self.name} step {self.step}/{self.total} {self.line} "
                       f"({_fmt_secs(time.monotonic() - self.t0)} this session)")


def _fmt_secs(secs: float) -> str:
    secs = int(round(secs))
    if secs >= 3600:
        return f"{secs // 3600}h{secs % 3600 // 60:02d}m"
    if secs >= 60:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs}s"


def _fmt_acc(acc: dict[str, float]) -> str:
    """The validation accuracy, else the first split's; "-" before any evaluation."""
    if not acc:
        return "-"
    key = "val" if "val" in acc else next(iter(acc))
    return f"{acc[key]:.3f}"
