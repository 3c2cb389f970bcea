"""What a training run has done so far, as one typed object.

`TrainState` holds the counters, the end-of-run flags, the optimiser and RNG states and the
pending loss sums that a resumed run needs to continue exactly where the interrupted one
stopped; `save` writes them (with the weights) as a checkpoint's `state.pt`, `load` + `restore`
bring them back. The metric rows live here too but go to `metrics.parquet`, written first, so
the table on disk is never behind a saved state."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from study.core.rundir import RunDir
from study.train import checkpoint as ckpt
from study.train.engine import Engine
from study.train.meter import LossMeter
from study.train.metrics import read_metrics, write_metrics

# the fields kept in memory only: the rows go to metrics.parquet, accuracy is derived from them
_NOT_IN_STATE_FILE = ("rows", "accuracy")


@dataclass
class TrainState:
    step: int = 0  # optimiser updates done
    train_time_s: float = 0.0  # seconds inside training steps, across resumptions
    wall_time_s: float = 0.0  # seconds since the run began, across resumptions
    steps_timed: int = 0  # steps counted in train_time_s
    tokens_timed: float = 0.0  # non-PAD tokens those steps trained on
    stopped_early: bool = False  # ended before `steps`: target accuracy reached or time budget spent
    time_limited: bool = False  # ended by the time budget (`max_minutes`)
    finished: bool = False  # nothing left to train; a re-run only summarises again
    examples_seen: int = 0  # step * batch size, as of the last save
    meter: dict = field(default_factory=dict)  # LossMeter.state(): loss sums not yet logged
    optimizer: dict | None = None  # AdamW's state_dict, as of the last save
    rng_cpu: torch.Tensor | None = None  # torch's CPU generator (dropout), as of the last save
    rng_cuda: list[torch.Tensor] = field(default_factory=list)  # one per CUDA device; [] on CPU
    rows: list[tuple] = field(default_factory=list)  # metric rows (step, split, stratum, metric, value)
    accuracy: dict[str, float] = field(default_factory=dict)  # newest evaluation: {split: overall}

    # --- state.pt ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The contents of state.pt: tensors and plain containers only, so that it loads with
        torch.load(weights_only=True)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in _NOT_IN_STATE_FILE}

    @classmethod
    def from_dict(cls, saved: dict) -> "TrainState":
        """A state from state.pt's contents; entries missing from older files keep their
        defaults, unknown ones are ignored."""
        names = {f.name for f in dataclasses.fields(cls)} - set(_NOT_IN_STATE_FILE)
        return cls(**{k: v for k, v in saved.items() if k in names})

    @classmethod
    def load(cls, checkpoint_dir: Path) -> "TrainState":
        return cls.from_dict(ckpt.read_state(checkpoint_dir))

    # --- saving and restoring ---------------------------------------------------------------
    def capture(self, engine: Engine, meter: LossMeter) -> None:
        """Copy in what lives outside the state between saves: the pending loss sums, the
        optimiser and the RNGs."""
        self.meter = meter.state()
        self.optimizer = engine.optimizer.state_dict()
        self.rng_cpu = torch.get_rng_state()
        self.examples_seen = self.step * engine.cfg.batch_size
        self.rng_cuda = torch.cuda.get_rng_state_all() if engine.runtime.device.type == "cuda" else []

    def save(self, run: RunDir, engine: Engine, meter: LossMeter, meta: dict, *,
             resume: bool, keep_state: str) -> Path:
        """Write metrics.parquet, then a checkpoint of the weights at `step` holding this state
        (a resume point between logged checkpoints when `resume`)."""
        self.capture(engine, meter)
        write_metrics(run, self.rows)  # first: a resume drops rows newer than its checkpoint
        return ckpt.save(run, self.step, engine.model,
                         {**meta, "finished": self.finished, "stopped_early": self.stopped_early},
                         self.to_dict(), resume=resume, keep_state=keep_state)

    def restore(self, run: RunDir, engine: Engine) -> None:
        """Put the saved optimiser and RNG states back, and read the metric rows up to `step`.
        The CUDA generators come back only where the device count matches the one they were
        saved with (a run may resume on another machine; dropout then draws differently)."""
        engine.load_optimizer(self.optimizer)
        torch.set_rng_state(self.rng_cpu)
        if engine.runtime.device.type == "cuda" and len(self.rng_cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(self.rng_cuda)
        self.rows = read_metrics(run, self.step)
