"""How long a run would take on this machine, known before it starts.

`python -m study run task=binding model=gpt12` trains the paper's preset: weeks on a laptop
CPU. So before a run works on the CPU, `check_long` estimates its training and its analyses
(`study/run/analysis_time.py`, priced from the training step), and refuses in one line
(naming the estimate by part, the rate, the faster choices and `long=ok`) when they exceed an
hour:

1. an optimistic bound first, from the parameter count (6 FLOPs per parameter and token, at a
   rate per CPU thread that no small network beats): most runs end here, with no torch work;
2. else a probe of the training step (`probe`): the run's own network and engine on batches
   of random tokens of the task's length (no data to build), timed over about a second after a
   warm-up; a step too slow to time (a paper-size network: tens of seconds a step here) is
   priced instead, its FLOPs at the rate the engine reaches on its family, a known share of
   this CPU's matmul rate measured now, so that the answer comes within seconds.

A GPU run is not held back: at paper scale a GPU is the intended machine. Resuming counts only
the steps left. `measure` (which `doctor` prints) times the real data stream instead.

A local sweep is held to the same hour by the same check: its runs that would work on this
CPU, `jobs` at once with their share of the threads, each run's time estimated the same way
(one probe per distinct setting), the total as the launcher would schedule them, then the
comparisons at its end; the refusal names each part (training, analyses, comparisons).
"""
from __future__ import annotations

import contextlib
import dataclasses
import heapq
import json
import os
import time
from collections.abc import Callable
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


PROBE_STEP_S = 0.25  # a step slower than this (by the bound) is priced, not timed
# the share of this CPU's float32 matmul rate that the engine's training step reaches, per
# family [measured: `python -m study bench train model=all scale=small`, 2-core CPU,
# docs/performance.md]; a family not listed is priced at the slowest share
ENGINE_SHARE = {"gpt12": 0.45, "attn2": 0.47, "rope2": 0.23, "gru": 0.15, "lstm": 0.08}


def probe(cfg, task, seconds: float = 1.0) -> float:
    """Seconds of one training step of `cfg` on this machine (`check_long`'s probe). A step
    the bound calls fast is timed: a fresh network through the run's engine on random tokens
    of the task's length, after one warm-up step. A slow one (a paper-size network on a CPU,
    tens of seconds a step) is priced: its FLOPs (6 per parameter and token) at the share of
    this CPU's matmul rate, measured now, that the engine reaches on its family
    (`ENGINE_SHARE`), so that the answer comes within seconds."""
    if optimistic_seconds(cfg, task, 1) > PROBE_STEP_S:
        share = ENGINE_SHARE.get(cfg.model, min(ENGINE_SHARE.values()))
        return _flops(cfg, task) / (matmul_rate() * share)
    import torch

    from study.core import registry
    from study.train.engine import Engine
    from study.train.runtime import resolve_runtime

    train = dataclasses.replace(cfg.train, steps=10**7, warmup_steps=0)
    rt = resolve_runtime(train)
    torch.manual_seed(cfg.seed)
    model = registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab), task.seq_len)
    model.to(rt.device).train()
    engine = Engine(model, train, rt, task.output_ids, len(task.vocab))
    return _timed(engine, task, cfg.train.batch_size, rt.device, seconds)


def matmul_rate(seconds: float = 0.3, n: int = 256) -> float:
    """This CPU's float32 matmul rate now (FLOP/s), on as many threads as torch has."""
    import torch
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    count, start = 0, time.perf_counter()
    while count < 2 or time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start)


def _timed(engine, task, rows: int, device, seconds: float) -> float:
    """Seconds a step of `rows` random examples takes, after one warm-up step; as many steps
    as fit in `seconds`, at least one. A warm-up step that alone takes longer than `seconds`
    (a recurrent network run free, op by op, on a busy CPU) is the answer: a step's first
    run costs little more than the next on a CPU, which compiles nothing."""
    import torch

    from study.train.runtime import sync
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, len(task.vocab), (rows, task.seq_len), generator=g).to(device)
    from study.core.labels import IGNORE
    answer = int(task.output_ids[0]) if task.output_ids else 0
    targets = torch.full_like(ids, answer)  # (rows, seq_len)
    if engine.cfg.loss_on == "answer":  # the answer's position alone is scored
        targets[:, :-1] = IGNORE
    start = time.perf_counter()
    engine.step(ids, targets, None, 1e-4)
    sync(device)
    if time.perf_counter() - start > seconds:
        return time.perf_counter() - start
    steps, start = 0, time.perf_counter()
    while steps < 1 or time.perf_counter() - start < seconds:
        engine.step(ids, targets, None, 1e-4)
        steps += 1
    sync(device)
    return (time.perf_counter() - start) / steps


def rate(step_s: float) -> str:
    """A step time in readable units: "12.3 steps/s", "0.48 steps/s", "24 s a step"."""
    if step_s <= 0:
        return "no time a step"
    if step_s < 1:
        per = 1 / step_s
        return f"{per:.1f} steps/s" if per >= 10 else f"{per:.2f} steps/s"
    return f"{step_s:.1f} s a step" if step_s < 10 else f"{step_s:.0f} s a step"


def _flops(cfg, task) -> float:
    """A training step's FLOPs: 6 per parameter and token."""
    params = parameter_count(cfg.model_config, len(task.vocab), task.seq_len)
    return 6.0 * params * cfg.train.batch_size * task.seq_len


def optimistic_seconds(cfg, task, steps: int, threads: int | None = None) -> float:
    """A lower bound on `steps` training steps' time on `threads` CPU threads (default: all of
    this machine's)."""
    return _flops(cfg, task) * steps / (FLOPS_PER_THREAD * max(1, threads or os.cpu_count() or 1))


def duration(seconds: float) -> str:
    """12 s, 14 min, 4 h 53 min, 12 days, 380 years."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    days = seconds / 86400
    return f"{days:,.0f} days" if days < 730 else f"{days / 365.25:,.0f} years"


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


def parts(cfg, task, steps_left: int, step_s: float) -> "Parts":
    """A run's training (`steps_left` steps of `step_s` seconds and its evaluations, a
    forward of `eval_examples` of each evaluated split at every checkpoint and every
    `eval_every` steps, within its time bound) and each of its analyses on this CPU
    (`study/run/analysis_time.py`)."""
    from study.run.analysis_time import Parts, analysis_seconds, forward_s
    train = cfg.train
    every = train.eval_every or (max(1, train.steps // 200) if train.target_accuracy else 0)
    evaluations = train.checkpoints + (steps_left // every if every else 0)
    evaluating = (evaluations * len(task.eval_splits) * train.eval_examples
                  * forward_s(cfg, step_s))
    return Parts(_capped(cfg, steps_left * step_s + evaluating),
                 analysis_seconds(cfg, task, step_s))


def said(p) -> str:
    """"training 12 min, analyses 31 min (das 25 min, patching 6 min)"."""
    if not p.analyses:
        return f"training {duration(p.training)}, no analyses"
    each = ", ".join(f"{n} {duration(s)}" for n, s in p.analyses.items())
    return (f"training {duration(p.training)}, analyses {duration(sum(p.analyses.values()))}"
            f" ({each})")


@dataclass(frozen=True)
class Estimate:
    """What `check_long` found: each run's parts, the total as scheduled, the comparisons."""
    runs: list  # SweepRun
    parts: list  # Parts, one per run
    steps: dict  # _speed_key -> seconds a step
    total: float
    compare: float = 0.0


def estimate(runs: list[SweepRun], jobs: int = 1, threads: int | None = None,
             compare=None) -> Estimate:
    """Each run's time on this CPU from one probe per distinct setting, the runs scheduled
    `jobs` at once, then the comparisons (`compare`: the sweep's CompareConfig, None: none)."""
    steps: dict[str, float] = {}
    for r in runs:
        key = _speed_key(r.cfg)
        if key not in steps:
            with _threads(threads):  # a CPU step compiles nothing: one warm-up
                steps[key] = probe(r.cfg, r.task)
    got = [parts(r.cfg, r.task, r.steps_left, steps[_speed_key(r.cfg)]) for r in runs]
    cmp = 0.0
    if compare is not None:
        from study.run.analysis_time import compare_seconds
        cmp = compare_seconds([(r.cfg, steps[_speed_key(r.cfg)]) for r in runs], compare)
    return Estimate(runs, got, steps, total_seconds([p.total for p in got], jobs) + cmp, cmp)


def check_duration(cfg, task, steps_left: int, allow_long: bool, on_cpu: bool) -> None:
    """`check_long` for one run in this process (the `run` command): nothing for a GPU run."""
    if on_cpu:
        check_long([SweepRun("this run", cfg, task, steps_left)], 1, None, allow_long)


def too_long(runs: list[SweepRun], jobs: int, threads: int | None, compare=None
             ) -> Estimate | None:
    """The estimate of CPU `runs` (as `check_long` runs them) where it exceeds `LONG_S`; None
    where they fit (the optimistic bound alone may say so, with no probe)."""
    runs = [r for r in runs if r.steps_left > 0 or r.cfg.analyses]
    if not runs:
        return None
    bounds = []
    for r in runs:
        step = optimistic_seconds(r.cfg, r.task, 1, threads)
        bounds.append(parts(r.cfg, r.task, r.steps_left, step).total)
    if total_seconds(bounds, jobs) <= LONG_S:
        return None
    est = estimate(runs, jobs, threads, compare)
    return est if est.total > LONG_S else None


def check_long(runs: list[SweepRun], jobs: int, threads: int | None, allow_long: bool,
               compare=None, instead: Callable[[], str] | str = "") -> None:
    """Refuse (UsageError) the CPU `runs` of a command when they would work for over `LONG_S`
    here, `jobs` at once with `threads` torch threads each (None: as this process has them),
    then the comparisons (`compare`), unless `allow_long`. One run (the `run` command) and a
    local sweep are held to the same hour by this one check; `instead`: the command that
    works, with its estimate, named in the refusal (a function giving it: called, and its
    own estimate probed, only when the runs are refused)."""
    if allow_long:
        return
    est = too_long(runs, jobs, threads, compare)
    if est is None:
        return
    runs = est.runs
    i = max(range(len(runs)), key=lambda j: est.parts[j].total)
    longest = runs[i]
    step = est.steps[_speed_key(longest.cfg)]
    small = all(r.cfg.scale == "small" for r in runs)
    instead = instead() if callable(instead) else instead
    faster = instead or ("a GPU" if small else "scale=small (the laptop preset), a GPU")
    speed = f"{longest.steps_left:,} steps at {rate(step)}, measured just now"
    if len(runs) == 1 and threads is None:
        raise UsageError(
            f"this run would take about {duration(est.total)} on this CPU "
            f"({said(est.parts[0])}; {speed}); choose {faster}, fewer train.steps or "
            f"analyses=none, or a bound (runtime.max_minutes=N); add long=ok to start it anyway")
    train = total_seconds([p.training for p in est.parts], jobs)
    work = total_seconds([p.total for p in est.parts], jobs)
    raise UsageError(
        f"this sweep would take about {duration(est.total)} on this CPU ({len(runs)} runs, "
        f"{min(jobs, len(runs))} at once with {threads} threads each: training "
        f"{duration(train)}, analyses {duration(work - train)}, comparisons "
        f"{duration(est.compare)}; the longest, {longest.label}, about "
        f"{duration(est.parts[i].total)}: {said(est.parts[i])}; {speed}); choose "
        f"{faster} (gpus= or launcher=slurm), fewer runs or fewer train.steps; add long=ok to "
        f"start it anyway")
