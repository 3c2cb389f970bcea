"""Training settings. Defaults are neutral; each task supplies its paper's values per scale
through its `train_presets` class attribute (the optimiser belongs to the paper's task)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

from study.core.errors import UsageError
from study.core.settings import runtime_fields, setting


@dataclass(frozen=True)
class TrainConfig:
    """Training settings. Those marked `runtime=True` say how a run executes, not what it
    computes (the device, time budgets, which states to keep, kernels that compute the same
    update in another order): spelt `runtime.NAME` on the command line, they are left out of
    a run's identity (its hash and the "same run?" check), so they may change when an
    interrupted run is resumed; config.json still records them. `precision` and `compile` are not among them: bf16 autocast and compiled
    kernels change the trained weights even on a CPU (compile=on vs off differ after 100
    steps)."""

    steps: int = setting(1000, "optimiser updates")
    batch_size: int = setting(64, "sequences per optimiser update")
    lr: float = setting(1e-4, "peak learning rate (AdamW)")
    weight_decay: float = setting(0.0, "AdamW weight decay (>= 0)")
    betas: tuple[float, float] = setting((0.9, 0.999), "AdamW (beta1, beta2), each in [0, 1)")
    warmup_steps: int = setting(0, "linear warm-up from 0 over this many steps")
    schedule: Literal["linear", "constant", "exp", "inverse_sqrt"] = setting(
        "linear",
        "after warm-up: linear decays to 0 at `steps`; constant; exp multiplies by "
        "`decay_rate` every `decay_steps` down to `min_lr`; inverse_sqrt is the counting "
        "study's lr * (warmup / step) ** decay_rate, floored at `min_lr`")
    decay_rate: float = setting(0.5, "factor (exp) or exponent (inverse_sqrt) of the decay")
    decay_steps: int = setting(1000, "steps between exp decays")
    min_lr: float = setting(0.0, "floor of the exp and inverse_sqrt schedules")
    grad_clip: float = setting(1.0, "max global grad norm; 0 disables")
    loss_on: Literal["answer", "all"] = setting(
        "answer", "scored positions only, or every next token")
    feed_outputs: Literal["auto", "teacher", "free"] = setting(
        "auto",
        "inputs after a scored position: teacher (the true token) or free (the model's own "
        "argmax, detached); auto: free for recurrent families, teacher for the others, as "
        "Grant et al.'s code trains them; evaluation always runs free, as they validate "
        "(study/train/feed.py)")
    checkpoints: int = setting(24, "number of log-spaced checkpoints (dense early, sparse late)")
    eval_examples: int = setting(
        2000, "per evaluation split at each checkpoint, evenly spaced over the split (0 = whole "
        "split)")
    target_accuracy: Optional[float] = setting(
        None, "stop once the validation split reaches it (`val`; a task without one: every "
        "eval split but test, heldout and gen)")
    max_minutes: float = setting(
        0.0, "stop (evaluated, checkpointed) after this much wall time; 0 = no limit", runtime=True)
    device: str = setting("auto", "auto | cpu | cuda | cuda:N", runtime=True)
    precision: Literal["auto", "fp32", "bf16"] = setting("auto", "auto: bf16 autocast on CUDA")
    compile: Literal["auto", "on", "off"] = setting(
        "auto", "auto: torch.compile on CUDA; if compiling fails, one line on stderr and "
        "training goes on eagerly")
    fused: Literal["auto", "on", "off"] = setting(
        "auto", "AdamW's fused kernel; auto: on CUDA", runtime=True)
    cuda_graphs: Literal["auto", "on", "off"] = setting(
        "auto", "replay the compiled forward and backward as CUDA graphs (torch.compile's "
        "reduce-overhead mode): a small network's step is bound by kernel launches, not FLOPs; "
        "auto: on when compiled on CUDA; no effect on the CPU", runtime=True)
    data_workers: int = setting(
        -1, "processes generating the batches of tasks that sample them on the fly; -1 = auto: "
        "none on the CPU, up to 8 on CUDA; the batches are the same for any number", runtime=True)
    eval_every: int = setting(
        0, "extra evaluations between checkpoints (they also drive early stopping); 0 = auto: "
        "every ~0.5% of `steps` when target_accuracy is set, otherwise only at checkpoints")
    log_every: int = setting(0, "train loss/lr rows every this many steps; 0 = auto (~500 a run)")
    resume_minutes: float = setting(
        10.0, "write a resume point this often between checkpoints; 0 = never", runtime=True)
    progress_seconds: float = setting(
        30.0, "when stderr is not a terminal (a SLURM log, a file), a progress line this often "
        "(step, loss, accuracy, tokens/s, ETA); 0 = none", runtime=True)
    keep_state: Literal["last", "all"] = setting(
        "last", "which checkpoints keep the optimiser/RNG state: the two newest (the previous one is "
        "the fallback for a damaged newest) or every one", runtime=True)

    def __post_init__(self):
        def bad(key, allowed):
            value = getattr(self, key)
            shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
            group = "runtime" if key in runtime_fields(TrainConfig) else "train"
            raise UsageError(f"{group}.{key}={shown}: {allowed}")

        for name in ("steps", "batch_size", "checkpoints", "decay_steps"):
            if getattr(self, name) < 1:
                bad(name, "must be at least 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            bad("lr", "must be a finite number > 0")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            bad("weight_decay", "must be a finite number >= 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            bad("betas", "two numbers, each in [0, 1)")
        if not 0 <= self.warmup_steps <= self.steps:
            bad("warmup_steps", f"must be in 0..train.steps ({self.steps})")
        if not (math.isfinite(self.decay_rate) and self.decay_rate > 0):
            bad("decay_rate", "must be a finite number > 0")
        if not (math.isfinite(self.min_lr) and self.min_lr >= 0):
            bad("min_lr", "must be a finite number >= 0")
        if not (math.isfinite(self.grad_clip) and self.grad_clip >= 0):
            bad("grad_clip", "must be 0 (off) or a finite number > 0")
        for name in ("eval_every", "log_every", "eval_examples"):
            if getattr(self, name) < 0:
                bad(name, "must be 0 (auto) or positive")
        if not (math.isfinite(self.max_minutes) and self.max_minutes >= 0):
            bad("max_minutes", "must be 0 (no limit) or a finite number > 0")
        if not (math.isfinite(self.progress_seconds) and self.progress_seconds >= 0):
            bad("progress_seconds", "must be 0 (none) or a finite number > 0")
        if not (math.isfinite(self.resume_minutes) and self.resume_minutes >= 0):
            bad("resume_minutes", "must be 0 (never) or a finite number > 0")
        if self.feed_outputs not in ("auto", "teacher", "free"):
            bad("feed_outputs", "must be auto, teacher or free")
        for name in ("fused", "cuda_graphs"):
            if getattr(self, name) not in ("auto", "on", "off"):
                bad(name, "must be auto, on or off")
        if self.data_workers < -1:
            bad("data_workers", "must be -1 (auto), 0 (a background thread) or a number of processes")
        if self.keep_state not in ("last", "all"):
            bad("keep_state", "must be 'last' or 'all'")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            bad("target_accuracy", "must be in (0, 1]")
