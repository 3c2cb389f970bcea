"""A sweep's GPU time, estimated on the CPU: `python -m study.sweep.gpu_time study=NAME`.

The networks here are small: on a GPU their training step is bound by the kernels it
launches, not by its arithmetic. So the estimate counts, on the CPU, what one step of each
run issues: its tensor operations (a `TorchDispatchMode` counting every op that is not a view,
each a kernel launch on a GPU) and its FLOPs (torch's `flop_registry`), for a training step
through the run's engine and, where the run asks for DAS, one update of each batch its search
trains at a k on a GPU (`study/analyses/das/loop.Batch.update`; `search.batches`: by
default every restart of every trained alignment kind in one forward). A fused
recurrent kernel (`torch._VF.gru` / `lstm`, which a recurrent network's intervened forward
runs) is one operation on CUDA (cuDNN) each way, where the CPU runs it as a loop of small
operations per time step: it counts as one operation issued forward and one backward, and
the CPU's operations inside it as kernels it runs on the GPU (`kernels`; cuDNN fuses each
step's gates into fewer, so this bounds them from above). A step then takes on the GPU

    max(ops x OP_S, busy),   busy = (ops + kernels) x KERNEL_S + FLOPs / (PEAK x MFU)

(issuing its operations, or the GPU's own work where that is longer) and keeps the GPU
itself busy `busy` of it. `OP_S` is
calibrated in the same process on the one measured point we have: an H200 trained
assign_add x attn2 at scale=paper for 40,000 steps in 173 s (`ANCHOR`, evaluations every 100
steps included), i.e. 173 s / 40,000 divided by that step's counted ops. The rest are
[ours] assumptions, not measurements: bf16 peak `PEAK`, utilisation `MFU` of a large matmul
workload, `KERNEL_S` per small kernel, `START_S` per run (interpreter, CUDA context, compiling).

A run's time is START_S + training steps x its step + DAS updates x their update (each batch
`das.steps` updates at every searched k and control search at its k: early stops only
shorten it). The runs are scheduled as the local launcher packs them (`jobs_per_gpu=auto` on a
GPU node of `CORES` cores), and a wave of packed runs lasts at least the sum of their GPU-busy
time (kernels of different processes do not overlap). Every number printed is such an
estimate until a GPU run measures it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
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


FUSED = ("gru", "lstm", "rnn_tanh", "rnn_relu")  # torch's fused recurrent kernels


class _Ops(TorchDispatchMode):
    """Counts the tensor operations (not views) run under it and their FLOPs (torch's
    `flop_registry`, what `FlopCounterMode` counts with: that mode also hooks every module,
    which would send a recurrent network down its step loop, `study/models/nets/rnn.py`).
    Inside a fused kernel (`_Fused`) the operations the CPU runs are the kernel's own work
    on the GPU (`kernels`), not operations issued one by one."""

    def __init__(self):
        super().__init__()
        self.count = 0  # operations issued
        self.kernels = 0  # GPU kernels run inside fused operations
        self.flops = 0.0
        self.inside = 0

    @contextlib.contextmanager
    def fused(self):
        """One fused operation: issued once, what runs inside it counted as its kernels."""
        self.count += 1
        self.inside += 1
        try:
            yield
        finally:
            self.inside -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils.flop_counter import flop_registry
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not getattr(func, "is_view", False):
            if self.inside:
                self.kernels += 1
            else:
                self.count += 1
        count_flops = flop_registry.get(func._overloadpacket)
        if count_flops is not None:
            self.flops += count_flops(*args, **kwargs, out_val=out)
        return out


class _Opaque(torch.autograd.Function):
    """A fused recurrent kernel as CUDA runs it (cuDNN: `_cudnn_rnn` forward,
    `_cudnn_rnn_backward` backward): one operation each way. The CPU runs the same function
    as a loop of small operations per time step; those are counted as the kernels the fused
    operation runs on the GPU (an upper bound: cuDNN fuses each step's gates)."""

    @staticmethod
    def forward(ctx, ops, call, spec, *leaves):
        from torch.utils._pytree import tree_unflatten
        inner = [x.detach().requires_grad_() if isinstance(x, torch.Tensor) and x.requires_grad
                 else x for x in leaves]
        with torch.enable_grad(), ops.fused():
            out = call(*tree_unflatten(inner, spec))
            ctx.ops, ctx.inner, ctx.outs = ops, inner, out
            return tuple(o.detach().clone() for o in out)

    @staticmethod
    def backward(ctx, *grads):
        wanted = [i for i, x in enumerate(ctx.inner)
                  if isinstance(x, torch.Tensor) and x.requires_grad]
        pairs = [(o, g) for o, g in zip(ctx.outs, grads) if o.requires_grad]
        with ctx.ops.fused():
            got = torch.autograd.grad([o for o, _ in pairs], [ctx.inner[i] for i in wanted],
                                      [g for _, g in pairs], allow_unused=True)
        out = [None] * (3 + len(ctx.inner))
        for i, g in zip(wanted, got):
            out[3 + i] = g
        return tuple(out)


class _Fused(TorchFunctionMode):
    """Runs torch's fused recurrent kernels (`torch._VF.gru`, ...) as one operation each way
    (`_Opaque`), as on CUDA; every other call as it is."""

    def __init__(self, ops: _Ops):
        super().__init__()
        self.ops = ops
        self.kernels = {getattr(torch._C._VariableFunctions, n) for n in FUSED}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func not in self.kernels:
            return func(*args, **(kwargs or {}))
        from torch.utils._pytree import tree_flatten
        leaves, spec = tree_flatten((args, kwargs or {}))  # (args, kwargs) as leaves
        return _Opaque.apply(self.ops, lambda a, kw: func(*a, **kw), spec, *leaves)


@dataclass(frozen=True)
class Cost:
    """What one step issues: tensor operations, the kernels fused operations run inside,
    and FLOPs."""
    ops: int
    kernels: int
    flops: float


def _counted(fn) -> Cost:
    ops = _Ops()
    with ops, _Fused(ops):
        fn()
    return Cost(ops.count, ops.kernels, ops.flops)


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


def das_batches(das) -> list[tuple[str, ...]]:
    """The batches of the DAS loop the search trains at each k on a GPU, each as its
    members' kinds (`study/analyses/das/search.batches`)."""
    from study.analyses.das.search import batches
    return [tuple(name for name, _ in group) for group in batches(das.alignments, das, "cuda")]


def das_update(cfg, task, kinds: tuple[str, ...]) -> Cost:
    """One update of a batch of the run's DAS loop (`study/analyses/das/loop.Batch`), its
    members of `kinds`, at its first variable's default site, its batch and largest k, on an
    untrained network: speed does not depend on weights."""
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.loop import Batch, Member
    from study.analyses.das.search import site_data
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
    width, n = data.src_train.shape[1], len(data.train)
    k = min(max(das.k), width)
    members = [Member(make_alignment(name, width, k, j, das.laf_form), j, das.lr)
               for j, name in enumerate(kinds)]
    batch = Batch(model, data, members, das.steps)
    g = torch.Generator().manual_seed(0)
    idx = torch.cat([torch.randperm(n, generator=g)[:das.batch_size] for _ in members])
    active = list(range(len(members)))
    batch.update(active, idx)
    return _counted(lambda: batch.update(active, idx))


def das_searches(cfg) -> int:
    """The k the run's DAS searches, over its variables: the search's ladder and its two
    controls', each up to `das.control_k`."""
    if "das" not in cfg.analyses:
        return 0
    das = cfg.analysis_configs["das"]
    from study.analyses.das.controls import control_ks as ladder
    control_ks = len(ladder(das)) if das.controls else 0
    variables = max(1, len(das.variables)) if das.variables and das.variables[0] not in (
        "main", "all") else 1
    return variables * (len(das.k) + 2 * control_ks)


def das_updates(cfg) -> int:
    """Updates the run's DAS loop makes at most: `das.steps` for each batch (`das_batches`)
    at each k searched (`das_searches`); early stops only shorten it."""
    if "das" not in cfg.analyses:
        return 0
    das = cfg.analysis_configs["das"]
    return das.steps * das_searches(cfg) * len(das_batches(das))


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
        """(seconds, GPU-busy seconds) of a step issuing `cost`: as long as issuing its
        operations takes, or the GPU's work if that is longer."""
        busy = (cost.ops + cost.kernels) * KERNEL_S + cost.flops / self.peak
        return max(cost.ops * self.op_s, busy), busy

    def run(self, cfg) -> RunTime:
        from study.run.build import build_task
        from study.sweep.packing import runs_per_gpu
        task = build_task(cfg)
        key = repr((cfg.task, cfg.model, cfg.task_config, cfg.model_config,
                    {k: v for k, v in dataclasses.asdict(cfg.train).items() if k != "steps"},
                    cfg.analysis_configs.get("das")))
        if key not in self._cache:
            das = cfg.analysis_configs.get("das")
            batches = das_batches(das) if "das" in cfg.analyses else []
            self._cache[key] = (self._step(train_step(cfg, task)),
                                [self._step(das_update(cfg, task, b)) for b in batches])
        (t_s, t_busy), das_steps = self._cache[key]
        n_das = das_updates(cfg) // max(1, len(das_steps))  # updates of each batch
        secs = START_S + cfg.train.steps * t_s + n_das * sum(d_s for d_s, _ in das_steps)
        busy = cfg.train.steps * t_busy + n_das * sum(d_busy for _, d_busy in das_steps)
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
              f"alone, the GPU busy {sum(t.busy for t in times):.0f} s of it; "
              f"packed {wall:.0f} s")
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
