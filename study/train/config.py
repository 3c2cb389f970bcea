"""Training settings. Defaults are neutral; each task supplies its paper's values per scale
through its `train_presets` class attribute (the optimiser belongs to the paper's task)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000  # optimiser updates
    batch_size: int = 64
    lr: float = 1e-4  # peak learning rate
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0  # linear warm-up from 0
    # after warm-up: "linear" decays to 0 at `steps`; "constant"; "exp" multiplies by
    # `decay_rate` every `decay_steps` down to `min_lr`; "inverse_sqrt" is the counting
    # study's lr * (warmup / step) ** decay_rate, floored at `min_lr`
    schedule: Literal["linear", "constant", "exp", "inverse_sqrt"] = "linear"
    decay_rate: float = 0.5
    decay_steps: int = 1000
    min_lr: float = 0.0
    grad_clip: float = 1.0  # max global grad norm; 0 disables
    loss_on: Literal["answer", "all"] = "answer"  # scored positions only, or every next token
    checkpoints: int = 24  # number of log-spaced checkpoints (dense early, sparse late)
    eval_examples: int = 2000  # per evaluation split at each checkpoint (0 = whole split)
    target_accuracy: Optional[float] = None  # stop once every eval split reaches it
    max_minutes: float = 0.0  # stop (evaluated, checkpointed) after this much wall time; 0 = no limit
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast on CUDA
    compile: Literal["auto", "on", "off"] = "auto"  # auto: torch.compile on CUDA
    # extra evaluations between checkpoints (they also drive early stopping); 0 = auto: every
    # ~0.5% of `steps` when target_accuracy is set, otherwise only at checkpoints
    eval_every: int = 0
    log_every: int = 0  # train loss/lr rows every this many steps; 0 = auto (~500 a run)
    resume_minutes: float = 10.0  # write a resume point this often between checkpoints; 0 = never
    # which checkpoints keep the optimiser/RNG state: only the newest ("last") or every one
    keep_state: Literal["last", "all"] = "last"

    def __post_init__(self):
        from study.core.errors import UsageError
        for name in ("steps", "batch_size", "checkpoints"):
            if getattr(self, name) < 1:
                raise UsageError(f"train.{name}={getattr(self, name)} must be at least 1")
        if self.lr <= 0:
            raise UsageError(f"train.lr={self.lr} must be positive")
        if not 0 <= self.warmup_steps <= self.steps:
            raise UsageError(f"train.warmup_steps={self.warmup_steps} must be in 0..train.steps ({self.steps})")
        for name in ("eval_every", "log_every"):
            if getattr(self, name) < 0:
                raise UsageError(f"train.{name}={getattr(self, name)} must be 0 (auto) or positive")
        if self.max_minutes < 0:
            raise UsageError(f"train.max_minutes={self.max_minutes} must be 0 (no limit) or positive")
        if self.resume_minutes < 0:
            raise UsageError(f"train.resume_minutes={self.resume_minutes} must be 0 (never) or positive")
        if self.keep_state not in ("last", "all"):
            raise UsageError(f"train.keep_state={self.keep_state!r} must be 'last' or 'all'")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise UsageError(f"train.target_accuracy={self.target_accuracy} must be in (0, 1]")
