"""How long a run's training would take on this machine, known before it starts.

`python -m study run task=counting model=gru` trains the paper's preset: hours on a laptop CPU.
So before a run trains on the CPU, `check_duration` estimates its training time, and refuses in
one line (naming the estimate, the faster choices and `long=ok`) when it exceeds an hour:

1. an optimistic bound first, from the parameter count (6 FLOPs per parameter and token, at a
   rate per CPU thread that no small network beats): most runs end here, with no torch work;
2. else a probe: the run's own model, data stream and training step, timed over a few steps
   after a warm-up (`measure`, which `doctor` prints too).

A GPU run is not held back: at paper scale a GPU is the intended machine. Resuming counts only
the steps left.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.memory import parameter_count

LONG_S = 3600.0  # a CPU run expected to train longer than this asks for `long=ok`
FLOPS_PER_THREAD = 2e10  # [ours] above the fp32 rate a CPU thread reaches on these small networks
PROBE_S = 3.0  # timed steps after the warm-up


@dataclass(frozen=True)
class Measured:
    """A probe of the training step: `steps` timed in `seconds` after a `setup` (model, data
    and warm-up steps) on `runtime`; `tokens` per batch."""

    steps: int
    seconds: float
    setup: float
    tokens: float
    runtime: object

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


def measure(cfg, task, seconds: float = PROBE_S, warm: int = 3) -> Measured:
    """Train a fresh network of `cfg` on `task` with the run's engine and data stream: `warm`
    steps (compilation, first allocations), then as many as fit in `seconds`."""
    import torch

    from study.core import registry
    from study.train.engine import Engine
    from study.train.runtime import resolve_runtime, sync
    from study.train.schedule import lr_at
    from study.train.streams import make_stream

    train = dataclasses.replace(cfg.train, steps=10**7, warmup_steps=0)
    rt = resolve_runtime(train)
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model = registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab), task.seq_len)
    model.to(rt.device).train()
    engine = Engine(model, train, rt, task.output_ids, len(task.vocab))
    stream = make_stream(task, train, cfg.seed, rt.device)
    try:
        for i in range(warm):
            engine.step(*stream.batch(i), lr_at(train, i))
        sync(rt.device)
        setup = time.perf_counter() - t0
        steps, start = 0, time.perf_counter()
        while steps < 2 or time.perf_counter() - start < seconds:  # a GPU runs ahead: sync below
            engine.step(*stream.batch(warm + steps), lr_at(train, warm + steps))
            steps += 1
        sync(rt.device)
        secs = time.perf_counter() - start
    finally:
        stream.close()
    return Measured(steps, secs, setup, stream.tokens_per_batch, rt)


def optimistic_seconds(cfg, task, steps: int) -> float:
    """A lower bound on `steps` training steps' time on this machine's CPU threads."""
    params = parameter_count(cfg.model_config, len(task.vocab), task.seq_len)
    flops = 6.0 * params * cfg.train.batch_size * task.seq_len * steps
    return flops / (FLOPS_PER_THREAD * max(1, os.cpu_count() or 1))


def duration(seconds: float) -> str:
    """12 s, 14 min, 4 h 53 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def check_duration(cfg, task, steps_left: int, allow_long: bool, on_cpu: bool) -> None:
    """Refuse (UsageError) a CPU run whose `steps_left` training steps would take over
    `LONG_S` here, unless `allow_long`; the probe runs only when the optimistic bound says
    it might."""
    if allow_long or not on_cpu or steps_left <= 0:
        return
    if optimistic_seconds(cfg, task, steps_left) <= LONG_S:
        return
    m = measure(cfg, task, seconds=2.0, warm=1)  # a CPU step compiles nothing: one warm-up
    est = steps_left / m.steps_per_s
    if est <= LONG_S:
        return
    faster = "scale=small (the laptop preset), a GPU" if cfg.scale != "small" else "a GPU"
    raise UsageError(
        f"this run would train for about {duration(est)} on this CPU ({steps_left:,} steps at "
        f"{m.steps_per_s:.1f} steps/s, measured just now); choose {faster}, or fewer "
        f"train.steps; add long=ok to start it anyway")
