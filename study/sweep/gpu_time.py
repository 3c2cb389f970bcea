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
the kernels cuDNN runs inside it as cuDNN's RNN implementation is described (Appleyard,
Kočiský & Blunsom 2016, "Optimizing Performance of Recurrent Neural Networks on GPUs",
arXiv:1604.01946, the optimisations in cuDNN 5 on: the input's GEMM for every step at once,
then per step one GEMM of the recurrent weights for all gates and one kernel of the fused
element-wise gate operations; `CUDNN_*`). The CPU's own operations inside it, as if each were
a GPU kernel, give an upper bound (`Cost.bound`, `kernels=cpu`). A step then takes on the GPU

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
# cuDNN's kernels for one layer and direction of a recurrent call over T steps (Appleyard et
# al. 2016, arXiv:1604.01946): forward, the input GEMM of every step at once, then per step
# the recurrent GEMM and the fused gate kernel; backward, per step the fused gate gradient and
# the recurrent GEMM, then the input's gradient GEMM and the two weight-gradient GEMMs.
CUDNN_STEP = 2  # kernels per time step, each way
CUDNN_FORWARD = 1  # kernels per layer and direction, forward, besides the steps'
CUDNN_BACKWARD = 3  # the same, backward
KERNEL_MODELS = ("cudnn", "cpu")  # the kernels inside a recurrent call: cuDNN's, or the bound


FUSED = ("gru", "lstm", "rnn_tanh", "rnn_relu")  # torch's fused recurrent kernels


class _Ops(TorchDispatchMode):
    """Counts the tensor operations (not views) run under it and their FLOPs (torch's
    `flop_registry`, what `FlopCounterMode` counts with: that mode also hooks every module,
    which would send a recurrent network down its step loop, `study/models/nets/rnn.py`).
    Inside a fused kernel (`_Fused`) the operations the CPU runs are not issued one by one:
    they bound the kernel's own work on the GPU (`bound`); `kernels` is cuDNN's count."""

    def __init__(self):
        super().__init__()
        self.count = 0  # operations issued
        self.kernels = 0  # GPU kernels run inside fused operations, as cuDNN runs them
        self.bound = 0  # the same, one for each operation the CPU runs inside them
        self.flops = 0.0
        self.inside = 0

    @contextlib.contextmanager
    def fused(self, kernels: int):
        """One fused operation running `kernels` GPU kernels: issued once, what the CPU runs
        inside it counted as the bound on its kernels."""
        self.count += 1
        self.kernels += kernels
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
                self.bound += 1
            else:
                self.count += 1
        count_flops = flop_registry.get(func._overloadpacket)
        if count_flops is not None:
            self.flops += count_flops(*args, **kwargs, out_val=out)
        return out


class _Opaque(torch.autograd.Function):
    """A fused recurrent kernel as CUDA runs it (cuDNN: `_cudnn_rnn` forward,
    `_cudnn_rnn_backward` backward): one operation each way, running `kernels` (forward,
    backward) GPU kernels. The CPU runs the same function as a loop of small operations per
    time step; those are counted as the bound on its kernels."""

    @staticmethod
    def forward(ctx, ops, call, kernels, spec, *leaves):
        from torch.utils._pytree import tree_unflatten
        inner = [x.detach().requires_grad_() if isinstance(x, torch.Tensor) and x.requires_grad
                 else x for x in leaves]
        with torch.enable_grad(), ops.fused(kernels[0]):
            out = call(*tree_unflatten(inner, spec))
            ctx.ops, ctx.inner, ctx.outs, ctx.kernels = ops, inner, out, kernels[1]
            return tuple(o.detach().clone() for o in out)

    @staticmethod
    def backward(ctx, *grads):
        wanted = [i for i, x in enumerate(ctx.inner)
                  if isinstance(x, torch.Tensor) and x.requires_grad]
        pairs = [(o, g) for o, g in zip(ctx.outs, grads) if o.requires_grad]
        with ctx.ops.fused(ctx.kernels):
            got = torch.autograd.grad([o for o, _ in pairs], [ctx.inner[i] for i in wanted],
                                      [g for _, g in pairs], allow_unused=True)
        out = [None] * (4 + len(ctx.inner))
        for i, g in zip(wanted, got):
            out[4 + i] = g
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
        return _Opaque.apply(self.ops, lambda a, kw: func(*a, **kw), cudnn_kernels(args),
                             spec, *leaves)


def cudnn_kernels(args) -> tuple[int, int]:
    """(forward, backward) kernels cuDNN runs for a call of a fused recurrent kernel with
    these positional arguments: `(input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first)`, or packed `(data, batch_sizes, hx, params, has_biases,
    num_layers, dropout, train, bidirectional)`, whose steps are `len(batch_sizes)`."""
    packed = isinstance(args[1], torch.Tensor) and args[1].dim() == 1 and \
        not args[1].is_floating_point()
    if packed:
        steps, layers, both = len(args[1]), int(args[5]), bool(args[8])
    else:
        steps, layers, both = args[0].shape[1 if args[8] else 0], int(args[4]), bool(args[7])
    cells = layers * (2 if both else 1)
    return (cells * (CUDNN_STEP * steps + CUDNN_FORWARD),
            cells * (CUDNN_STEP * steps + CUDNN_BACKWARD))


@dataclass(frozen=True)
class Cost:
    """What one step issues: tensor operations, the kernels fused operations run inside (as
    cuDNN runs them, and their bound), and FLOPs."""
    ops: int
    kernels: int
    flops: float
    bound: int = 0


def _counted(fn) -> Cost:
    ops = _Ops()
    with ops, _Fused(ops):
        fn()
    return Cost(ops.count, ops.kernels, ops.flops, ops.bound)


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
    training: float = 0.0  # of `seconds`, training's steps
    das: float = 0.0  # of `seconds`, the DAS updates (the search and its controls)


class Estimator:
    """Steps costed once per distinct setting, the op time calibrated on `ANCHOR`; the
    kernels inside recurrent calls as `kernels` says (`KERNEL_MODELS`: cuDNN's, or the
    CPU's operations as the bound), which may be changed between estimates."""

    def __init__(self, gpu: str = "h200", kernels: str = "cudnn"):
        from study.run.build import build_task
        from study.run.config import resolve
        self.gpu, self.peak, self.kernels = gpu, PEAK[gpu] * MFU, kernels
        anchor = resolve(dict(ANCHOR))
        self.op_s = ANCHOR_S_PER_STEP / train_step(anchor, build_task(anchor)).ops
        self._cache: dict = {}

    def _step(self, cost: Cost) -> tuple[float, float]:
        """(seconds, GPU-busy seconds) of a step issuing `cost`: as long as issuing its
        operations takes, or the GPU's work if that is longer."""
        inside = cost.bound if self.kernels == "cpu" else cost.kernels
        busy = (cost.ops + inside) * KERNEL_S + cost.flops / self.peak
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
            self._cache[key] = (train_step(cfg, task), [das_update(cfg, task, b) for b in batches])
        train_cost, das_costs = self._cache[key]
        (t_s, t_busy), das_steps = self._step(train_cost), [self._step(c) for c in das_costs]
        n_das = das_updates(cfg) // max(1, len(das_steps))  # updates of each batch
        train_s, das_s = cfg.train.steps * t_s, n_das * sum(d_s for d_s, _ in das_steps)
        secs = START_S + train_s + das_s
        busy = cfg.train.steps * t_busy + n_das * sum(d_busy for _, d_busy in das_steps)
        per_gpu = runs_per_gpu(cfg, task, "auto", MEMORY[self.gpu], CORES)
        return RunTime(f"{cfg.task} × {cfg.model} seed {cfg.seed}", secs, busy, per_gpu,
                       train_s, das_s)


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


def estimate(args: list[str], gpu: str = "h200", est: Estimator | None = None
             ) -> list[tuple[str, list[RunTime], float]]:
    """(part, its runs' times, its packed wall time) for each part of the sweep `args`
    describes (a study's parts, or the one sweep), on one GPU; `est` (one costs each setting
    once) a new `Estimator` unless given."""
    from study.core.settings import split_args
    from study.sweep import studies
    from study.sweep.plan import parse

    kv = split_args(args)
    parts = [kv]
    if "study" in kv:
        study = studies.load(kv["study"])
        rest = {k: v for k, v in kv.items() if k != "study"}
        parts = [{**s, **rest} for s in study.sweeps()]
    est = est or Estimator(gpu)
    out = []
    for part in parts:
        plan, _ = parse([f"{k}={v}" for k, v in part.items()])
        times = [est.run(r.cfg) for r in plan.runs]
        name = ", ".join(sorted({f"{r.cfg.task} × {r.cfg.model}" for r in plan.runs}))
        out.append((name, times, packed_seconds(times)))
    return out


def _whole(parts) -> float:
    return packed_seconds([t for _, times, _ in parts for t in times])


def main(args: list[str]) -> int:
    from study.run.estimate import duration
    gpu, kernels = "h200", "cudnn"
    rest = []
    for a in args:
        key, _, value = a.partition("=")
        if key == "gpu":
            if value not in PEAK:
                print(f"error: gpu={value!r}: choose from {', '.join(PEAK)}", file=sys.stderr)
                return 2
            gpu = value
        elif key == "kernels":
            if value not in KERNEL_MODELS:
                print(f"error: kernels={value!r}: choose from {', '.join(KERNEL_MODELS)} (the "
                      f"kernels inside a recurrent call: cuDNN's, or the CPU's operations as an "
                      f"upper bound)", file=sys.stderr)
                return 2
            kernels = value
        else:
            rest.append(a)
    est = Estimator(gpu, kernels)
    parts = estimate(rest, gpu, est)
    total = 0.0
    inside = ("as cuDNN runs them" if kernels == "cudnn"
              else "one for each operation the CPU runs: an upper bound")
    print(f"GPU time estimated on the CPU for one {gpu.upper()} (not measured on a GPU; "
          f"study/sweep/gpu_time.py; kernels inside recurrent calls {inside}):")
    for name, times, wall in parts:
        longest = max(times, key=lambda t: t.seconds)
        print(f"- {name}: {len(times)} runs, up to {min(t.per_gpu for t in times)} per GPU; "
              f"each {duration(min(t.seconds for t in times))}–{duration(longest.seconds)} "
              f"alone (training {sum(t.training for t in times):.0f} s, DAS and its controls "
              f"{sum(t.das for t in times):.0f} s, starts {START_S * len(times):.0f} s in all), "
              f"the GPU busy {sum(t.busy for t in times):.0f} s of it; packed {wall:.0f} s")
        total += wall
    whole = _whole(parts)
    print(f"in all: {whole:.0f} s ({duration(whole)}) as one sweep packs them "
          f"({total:.0f} s one part after another); "
          + ("within" if whole <= JOB_S else "over") + f" the {JOB_S:.0f} s of one GPU job")
    if kernels == "cudnn":
        est.kernels = "cpu"
        bound = estimate(rest, gpu, est)
        busy = sum(t.busy for _, times, _ in bound for t in times)
        print(f"with every operation the CPU runs inside a recurrent call as a GPU kernel "
              f"(kernels=cpu, an upper bound): {_whole(bound):.0f} s "
              f"({duration(_whole(bound))}), the GPU busy {busy:.0f} s")
    return 0


if __name__ == "__main__":
    from study.core.errors import UsageError
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
