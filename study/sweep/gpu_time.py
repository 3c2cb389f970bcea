"""A sweep's GPU time, estimated on the CPU: `python -m study.sweep.gpu_time study=NAME`.

The networks here are small: on a GPU their training step is bound by the kernels it
launches, not by its arithmetic. So the estimate counts, on the CPU, what one step of each
run issues: its tensor operations (a `TorchDispatchMode` counting every op that is not a view,
each a kernel launch on a GPU) and its FLOPs (torch's `FlopCounterMode`), for a training step
through the run's engine and, where the run asks for DAS, one alignment update of its search
(`study/analyses/das/search.step`). A step then takes on the GPU

    max(ops x OP_S, FLOPs / (PEAK x MFU))

and keeps the GPU itself busy ops x KERNEL_S + FLOPs / (PEAK x MFU) of it. `OP_S` is
calibrated in the same process on the one measured point we have: an H200 trained
assign_add x attn2 at scale=paper for 40,000 steps in 173 s (`ANCHOR`, evaluations every 100
steps included), i.e. 173 s / 40,000 divided by that step's counted ops. The rest are
[ours] assumptions, not measurements: bf16 peak `PEAK`, utilisation `MFU` of a large matmul
workload, `KERNEL_S` per small kernel, `START_S` per run (interpreter, CUDA context, compiling).

A run's time is START_S + training steps x its step + DAS updates x its update (every
searched alignment, k, and control search at its k, all `das.steps` updates: early stops only
shorten it). The runs are scheduled as the local launcher packs them (`jobs_per_gpu=auto` on a
GPU node of `CORES` cores), and a wave of packed runs lasts at least the sum of their GPU-busy
time. Every number printed is such an estimate until a GPU run measures it.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ANCHOR = {"task": "assign_add", "model": "attn2", "scale": "paper"}
ANCHOR_S_PER_STEP = 173.0 / 40_000  # measured: H200, 40,000 steps in 173 s (bf16, compiled)
PEAK = {"h200": 989e12, "h100": 989e12}  # dense bf16 FLOP/s (NVIDIA's datasheets, SXM)
MEMORY = {"h200": 141 * 2**30, "h100": 80 * 2**30}
MFU = 0.3  # [ours] of the peak that matmul-heavy work reaches
KERNEL_S = 3e-6  # [ours] GPU time of one small kernel
START_S = 30.0  # [ours] per run: imports, CUDA context, torch.compile, final evaluation
CORES = 16  # a GPU node's cores (the H100/H200 nodes here have 16)
JOB_S = 480.0  # what one GPU job gives a study: 8 of its 10 minutes


class _Ops(TorchDispatchMode):
    """Counts the tensor operations (not views) run under it."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not getattr(func, "is_view", False):
            self.count += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class Cost:
    """What one step issues: tensor operations and FLOPs."""
    ops: int
    flops: float


def _counted(fn) -> Cost:
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as flops, _Ops() as ops:
        fn()
    return Cost(ops.count, float(flops.get_total_flops()))


def train_step(cfg, task) -> Cost:
    """One training step of `cfg` through the run's engine, eager on the CPU, after one
    warm-up step."""
    from study.core import registry
    from study.train.engine import Engine
    from study.train.runtime import resolve_runtime
    from study.train.schedule import lr_at
    from study.train.streams import make_stream

    train = dataclasses.replace(cfg.train, steps=10**7, warmup_steps=0, device="cpu",
                                compile="off", precision="fp32", data_workers=0)
    rt = resolve_runtime(train)
    torch.manual_seed(cfg.seed)
    model = registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab), task.seq_len)
    engine = Engine(model.train(), train, rt, task.output_ids, len(task.vocab))
    stream = make_stream(task, train, cfg.seed, rt.device)
    try:
        engine.step(*stream.batch(0), lr_at(train, 0))
        batch = stream.batch(1)
        return _counted(lambda: engine.step(*batch, lr_at(train, 1)))
    finally:
        stream.close()


def das_update(cfg, task) -> Cost:
    """One alignment update of the run's DAS search (its first variable, at its default site,
    its batch and largest k), on an untrained network: speed does not depend on weights."""
    from study.analyses.das.alignment import OrthogonalAlignment
    from study.analyses.das.search import site_data, step
    from study.core import registry
    from study.models.sites import default_sites
    from study.run.build import frozen

    das = cfg.analysis_configs["das"]
    torch.manual_seed(cfg.seed)
    model = frozen(registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab),
                                                         task.seq_len))
    kind, layer = default_sites(model, every_layer=False)[0]
    variable = (das.variables[0] if das.variables and das.variables[0] not in ("main", "all")
                else task.causal_variables[0])
    pairs = task.counterfactuals(variable, max(2 * das.batch_size, 256), split="train", seed=0)
    data = site_data(model, pairs, pairs, kind, layer, -1, torch.device("cpu"), outputs=task)
    width = data.src_train.shape[1]
    inst = OrthogonalAlignment(width, min(max(das.k), width))
    opt = torch.optim.Adam([p for p in inst.parameters() if p.requires_grad], lr=1e-3)
    idx = torch.arange(min(das.batch_size, len(data.train)))
    step(model, data, inst, opt, idx)
    return _counted(lambda: step(model, data, inst, opt, idx))


def das_updates(cfg) -> int:
    """Alignment updates the run's DAS makes at most: each trained alignment at each k, and
    its two control searches, each climbing the search's ladder up to `das.control_k`
    (restarts train together: one update)."""
    if "das" not in cfg.analyses:
        return 0
    das = cfg.analysis_configs["das"]
    from study.analyses.das import TRAINED
    from study.analyses.das.controls import control_ks as ladder
    trained = [a for a in das.alignments if a in TRAINED]
    control_ks = len(ladder(das)) if das.controls else 0
    restarts = 1 if das.batch_restarts else das.restarts
    variables = max(1, len(das.variables)) if das.variables and das.variables[0] not in (
        "main", "all") else 1
    return variables * len(trained) * das.steps * restarts * (len(das.k) + 2 * control_ks)


@dataclass(frozen=True)
class RunTime:
    label: str
    seconds: float  # on the GPU, alone
    busy: float  # of those, the GPU itself busy
    per_gpu: int  # runs one GPU holds (jobs_per_gpu=auto)


class Estimator:
    """Steps costed once per distinct setting, the op time calibrated on `ANCHOR`."""

    def __init__(self, gpu: str = "h200"):
        from study.run.build import build_task
        from study.run.config import resolve
        self.gpu, self.peak = gpu, PEAK[gpu] * MFU
        anchor = resolve(dict(ANCHOR))
        self.op_s = ANCHOR_S_PER_STEP / train_step(anchor, build_task(anchor)).ops
        self._cache: dict = {}

    def _step(self, cost: Cost) -> tuple[float, float]:
        """(seconds, GPU-busy seconds) of a step issuing `cost`."""
        flop_s = cost.flops / self.peak
        return max(cost.ops * self.op_s, flop_s), cost.ops * KERNEL_S + flop_s

    def run(self, cfg) -> RunTime:
        from study.run.build import build_task
        from study.sweep.packing import runs_per_gpu
        task = build_task(cfg)
        key = repr((cfg.task, cfg.model, cfg.task_config, cfg.model_config,
                    {k: v for k, v in dataclasses.asdict(cfg.train).items() if k != "steps"},
                    cfg.analysis_configs.get("das")))
        if key not in self._cache:
            train = self._step(train_step(cfg, task))
            das = self._step(das_update(cfg, task)) if "das" in cfg.analyses else (0.0, 0.0)
            self._cache[key] = train, das
        (t_s, t_busy), (d_s, d_busy) = self._cache[key]
        n_das = das_updates(cfg)
        secs = START_S + cfg.train.steps * t_s + n_das * d_s
        busy = cfg.train.steps * t_busy + n_das * d_busy
        per_gpu = runs_per_gpu(cfg, task, "auto", MEMORY[self.gpu], CORES)
        return RunTime(f"{cfg.task} × {cfg.model} seed {cfg.seed}", secs, busy, per_gpu)


def packed_seconds(times: list[RunTime]) -> float:
    """Wall time of runs packed on one GPU in this order, as the local launcher starts them:
    each as soon as its share fits; at least the GPU-busy time of all."""
    import heapq
    running: list[tuple[float, float]] = []  # (end, share)
    now = 0.0
    for t in times:
        share = 1.0 / t.per_gpu
        while running and sum(s for _, s in running) + share > 1.0 + 1e-9:
            now, _ = heapq.heappop(running)
        heapq.heappush(running, (now + t.seconds, share))
    wall = max((end for end, _ in running), default=0.0)
    return max(wall, sum(t.busy for t in times))


def estimate(args: list[str], gpu: str = "h200") -> list[tuple[str, list[RunTime], float]]:
    """(part, its runs' times, its packed wall time) for each part of the sweep `args`
    describes (a study's parts, or the one sweep), on one GPU."""
    from study.core.settings import split_args
    from study.sweep import studies
    from study.sweep.plan import parse

    kv = split_args(args)
    parts = [kv]
    if "study" in kv:
        study = studies.load(kv["study"])
        rest = {k: v for k, v in kv.items() if k != "study"}
        parts = [{**s, **rest} for s in study.sweeps()]
    est = Estimator(gpu)
    out = []
    for part in parts:
        plan, _ = parse([f"{k}={v}" for k, v in part.items()])
        times = [est.run(r.cfg) for r in plan.runs]
        name = ", ".join(sorted({f"{r.cfg.task} × {r.cfg.model}" for r in plan.runs}))
        out.append((name, times, packed_seconds(times)))
    return out


def main(args: list[str]) -> int:
    from study.run.estimate import duration
    gpu = "h200"
    rest = []
    for a in args:
        if a.startswith("gpu="):
            gpu = a.split("=", 1)[1]
            if gpu not in PEAK:
                print(f"error: gpu={gpu!r}: choose from {', '.join(PEAK)}", file=sys.stderr)
                return 2
        else:
            rest.append(a)
    parts = estimate(rest, gpu)
    total = 0.0
    print(f"GPU time estimated on the CPU for one {gpu.upper()} (not measured on a GPU; "
          f"study/sweep/gpu_time.py):")
    for name, times, wall in parts:
        longest = max(times, key=lambda t: t.seconds)
        print(f"- {name}: {len(times)} runs, up to {min(t.per_gpu for t in times)} per GPU; "
              f"each {duration(min(t.seconds for t in times))}–{duration(longest.seconds)} "
              f"alone; packed {wall:.0f} s")
        total += wall
    whole = packed_seconds([t for _, times, _ in parts for t in times])
    print(f"in all: {whole:.0f} s ({duration(whole)}) as one sweep packs them "
          f"({total:.0f} s one part after another); "
          + ("within" if whole <= JOB_S else "over") + f" the {JOB_S:.0f} s of one GPU job")
    return 0


if __name__ == "__main__":
    from study.core.errors import UsageError
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
