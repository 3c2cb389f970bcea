"""When things happen in a run: the learning rate of each update, and which steps log the
training loss, evaluate and write a checkpoint."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from study.train.config import TrainConfig


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate of update `step` (0-based). Warm-up rises linearly from 0 and the linear
    decay reaches 0 at `steps`, as transformers' get_linear_schedule_with_warmup does."""
    if step < cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "linear":
        return cfg.lr * max(0, cfg.steps - step) / max(1, cfg.steps - cfg.warmup_steps)
    if cfg.schedule == "inverse_sqrt":
        return max(cfg.min_lr, cfg.lr * (max(1, cfg.warmup_steps) / max(1, step)) ** cfg.decay_rate)
    decayed = cfg.lr * cfg.decay_rate ** ((step - cfg.warmup_steps) // cfg.decay_steps)
    return max(cfg.min_lr, decayed)


def checkpoint_steps(steps: int, n: int) -> list[int]:
    """Step 0 (untrained) plus n steps roughly geometric in [1, steps], strictly increasing and
    ending at `steps`: dense early, where the phase transitions are, sparse late [ours]."""
    if steps <= n:
        return list(range(0, steps + 1))
    raw = np.rint(np.geomspace(1, steps, n)).astype(np.int64)
    out = [1]
    for v in raw[1:]:
        out.append(max(int(v), out[-1] + 1))
    out[-1] = steps
    for i in range(n - 2, -1, -1):  # the forward pass may have pushed the tail past `steps`
        out[i] = min(out[i], out[i + 1] - 1)
    return [0] + out


def auto_intervals(cfg: TrainConfig) -> tuple[int, int]:
    """(log_every, eval_every); eval_every 0 = evaluate at checkpoints only."""
    log_every = cfg.log_every or max(1, cfg.steps // 500)
    eval_every = cfg.eval_every or (max(1, cfg.steps // 200) if cfg.target_accuracy else 0)
    return log_every, eval_every


@dataclass(frozen=True)
class Cadence:
    """Which steps of a run log, evaluate and checkpoint (the config's intervals resolved)."""
    log_every: int
    eval_every: int  # 0 = at checkpoints only
    checkpoints: frozenset[int]

    @classmethod
    def of(cls, cfg: TrainConfig) -> "Cadence":
        log_every, eval_every = auto_intervals(cfg)
        return cls(log_every, eval_every, frozenset(checkpoint_steps(cfg.steps, cfg.checkpoints)))

    def is_checkpoint(self, step: int) -> bool:
        return step in self.checkpoints

    def is_eval(self, step: int) -> bool:
        """An evaluation between checkpoints (checkpoints are always evaluated)."""
        return bool(self.eval_every) and step % self.eval_every == 0

    def is_log(self, step: int) -> bool:
        return step % self.log_every == 0
