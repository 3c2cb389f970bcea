"""How long a run's training would take on this machine, known before it starts.

`python -m study run task=counting model=gru` trains the paper's preset: hours on a laptop CPU.
So before a run trains on the CPU, `check_long` estimates its training time, and refuses in
one line (naming the estimate, the faster choices and `long=ok`) when it exceeds an hour:

1. an optimistic bound first, from the parameter count (6 FLOPs per parameter and token, at a
   rate per CPU thread that no small network beats): most runs end here, with no torch work;
2. else a probe: the run's own model, data stream and training step, timed over a few steps
   after a warm-up (`measure`, which `doctor` prints too).

A GPU run is not held back: at paper scale a GPU is the intended machine. Resuming counts only
the steps left.

A local sweep is held to the same hour by the same check: its runs that would train on
this CPU, `jobs` at once with their share of the threads, each run's time estimated the same
way (one probe per distinct setting), the total as the launcher would schedule them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import heapq
import json
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


def optimistic_seconds(cfg, task, steps: int, threads: int | None = None) -> float:
    """A lower bound on `steps` training steps' time on `threads` CPU threads (default: all of
    this machine's)."""
    params = parameter_count(cfg.model_config, len(task.vocab), task.seq_len)
    flops = 6.0 * params * cfg.train.batch_size * task.seq_len * steps
    return flops / (FLOPS_PER_THREAD * max(1, threads or os.cpu_count() or 1))


def duration(seconds: float) -> str:
    """12 s, 14 min, 4 h 53 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def _capped(cfg, seconds: float) -> float:
    """`seconds` of training, bounded by the run's `runtime.max_minutes` where it sets one."""
    cap = cfg.train.max_minutes * 60
    return min(seconds, cap) if cap > 0 else seconds


@dataclass(frozen=True)
class SweepRun:
    """A run a local sweep would train on this CPU: `steps_left` steps of `cfg` on `task`."""
    label: str
    cfg: object  # RunConfig
    task: object
    steps_left: int


def total_seconds(seconds: list[float], jobs: int) -> float:
    """When the last of runs taking `seconds` ends, started in this order `jobs` at once, each
    as soon as one ends (as the local launcher does)."""
    ends = [0.0] * max(1, jobs)
    for secs in seconds:
        heapq.heapreplace(ends, ends[0] + secs)
    return max(ends)


@contextlib.contextmanager
def _threads(n: int | None):
    """torch on `n` threads inside (None: as it is)."""
    if n is None:
        yield
        return
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _speed_key(cfg) -> str:
    """What a training step's speed depends on (not the seed, not the number of steps)."""
    train = {k: v for k, v in dataclasses.asdict(cfg.train).items() if k != "steps"}
    return json.dumps([cfg.task, cfg.model, dataclasses.asdict(cfg.task_config),
                       dataclasses.asdict(cfg.model_config), train], sort_keys=True, default=str)


def steps_left(cfg, path, force: bool = False) -> int:
    """The training steps a run at `path` has left: all of them for a new run (or `force`),
    those after its newest resume point otherwise. OSError for a folder that cannot be read."""
    from study.train.checkpoint import state_dirs
    done = [] if force else state_dirs(path)
    return cfg.train.steps - (done[-1][0] if done else 0)


def on_cpu(cfg, gpus_here: bool) -> bool:
    """Whether the run trains on this machine's CPU: `runtime.device=cpu`, or `auto` where it
    gets no GPU (`gpus_here`: a GPU is assigned to it or the machine has an NVIDIA driver)."""
    return cfg.train.device == "cpu" or (cfg.train.device == "auto" and not gpus_here)


def check_duration(cfg, task, steps_left: int, allow_long: bool, on_cpu: bool) -> None:
    """`check_long` for one run in this process (the `run` command): nothing for a GPU run."""
    if on_cpu:
        check_long([SweepRun("this run", cfg, task, steps_left)], 1, None, allow_long)


def check_long(runs: list[SweepRun], jobs: int, threads: int | None, allow_long: bool) -> None:
    """Refuse (UsageError) the CPU `runs` of a command when they would train for over `LONG_S`
    here, `jobs` at once with `threads` torch threads each (None: as this process has them),
    unless `allow_long`: the optimistic bound first, then one probe per distinct setting. One
    run (the `run` command) and a local sweep are held to the same hour by this one check."""
    runs = [r for r in runs if r.steps_left > 0]
    if allow_long or not runs:
        return
    bounds = [_capped(r.cfg, optimistic_seconds(r.cfg, r.task, r.steps_left, threads))
              for r in runs]
    if total_seconds(bounds, jobs) <= LONG_S:
        return
    speeds: dict[str, float] = {}
    for r in runs:
        key = _speed_key(r.cfg)
        if key not in speeds:
            with _threads(threads):  # a CPU step compiles nothing: one warm-up
                speeds[key] = measure(r.cfg, r.task, seconds=2.0, warm=1).steps_per_s
    secs = [_capped(r.cfg, r.steps_left / speeds[_speed_key(r.cfg)]) for r in runs]
    total = total_seconds(secs, jobs)
    if total <= LONG_S:
        return
    i = max(range(len(runs)), key=secs.__getitem__)
    longest = runs[i]
    small = all(r.cfg.scale == "small" for r in runs)
    faster = "a GPU" if small else "scale=small (the laptop preset), a GPU"
    speed = f"{longest.steps_left:,} steps at {speeds[_speed_key(longest.cfg)]:.1f} steps/s"
    if len(runs) == 1 and threads is None:
        raise UsageError(
            f"this run would train for about {duration(total)} on this CPU ({speed}, measured "
            f"just now); choose {faster}, fewer train.steps or a bound (runtime.max_minutes=N); "
            f"add long=ok to start it anyway")
    raise UsageError(
        f"this sweep would train for about {duration(total)} on this CPU ({len(runs)} runs, "
        f"{min(jobs, len(runs))} at once with {threads} threads each; the longest, "
        f"{longest.label}, about {duration(secs[i])}: {speed}, measured just now); choose "
        f"{faster} (gpus= or launcher=slurm), fewer runs or fewer train.steps; add long=ok to "
        f"start it anyway")
