"""How many runs share one GPU (`jobs_per_gpu=auto|N`), from each run's estimated size.

The networks here hold 0.1-0.4 M parameters, except gpt12 (37.8 M at scale=paper). A small
network's training step is bound by kernel launches and the Python that issues them, not by
the GPU's arithmetic: one such run keeps an H100 busy a few percent of the time, so several
runs side by side, each in its own process with its own CUDA context, fill it. A large network
fills the GPU alone. `auto` therefore gives each run a number of runs per GPU:

- 1 for a network of `ALONE_PARAMS` parameters or more (gpt12 at paper scale): its GPU to
  itself;
- else as many as fit in the GPU's memory (`USABLE` of it, each run's coarse training bound of
  `study/core/memory.py` plus `CONTEXT_BYTES` for its CUDA context, allocator caches and
  compiled kernels), at most `MAX_PER_GPU`, and at most the CPU cores per GPU: each packed run
  drives its GPU from one core of its own.

A run may start on a GPU only while the shares (1 / its number) of the runs on it add up to at
most 1: a gpt12 run waits for an empty GPU and, once on it, no other run joins it.
`jobs_per_gpu=N` gives every run the number N.
"""
from __future__ import annotations

from study.core.errors import UsageError
from study.core.memory import GIB, parameter_count, training_bytes

ALONE_PARAMS = 10_000_000  # [ours] gpt12 (37.8 M) keeps a GPU to itself; the others are < 0.5 M
CONTEXT_BYTES = 1 * GIB  # [ours] a process's CUDA context, caches and compiled graphs, coarse
USABLE = 0.8  # of the GPU's memory shared out; the rest is headroom for fragmentation
MAX_PER_GPU = 8  # [ours] past this the runs' launches contend for the GPU's queue


def check(text: str, key: str = "jobs_per_gpu") -> str:
    """`auto` or a whole number >= 1, as given; a one-line UsageError otherwise."""
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"{key}={text!r}: expected auto (from each run's estimated memory and "
                         f"size) or a whole number >= 1")
    return str(n)


def most_per_gpu(per_gpu: str, cores_per_gpu: int) -> int:
    """The most runs one GPU may hold under `per_gpu` (auto: by the cores per GPU)."""
    if per_gpu != "auto":
        return int(per_gpu)
    return max(1, min(MAX_PER_GPU, cores_per_gpu))


def runs_per_gpu(cfg, task, per_gpu: str, gpu_bytes: int | None, cores_per_gpu: int) -> int:
    """How many runs like `cfg` (a RunConfig of `task`) may share one GPU of `gpu_bytes`
    (None: unknown, memory does not limit)."""
    if per_gpu != "auto":
        return int(per_gpu)
    vocab, seq_len = len(task.vocab), task.seq_len
    if parameter_count(cfg.model_config, vocab, seq_len) >= ALONE_PARAMS:
        return 1
    most = most_per_gpu("auto", cores_per_gpu)
    if gpu_bytes is None:
        return most
    params, acts = training_bytes(cfg.model_config, cfg.train.batch_size, seq_len, vocab)
    fit = int(USABLE * gpu_bytes // (params + acts + CONTEXT_BYTES))
    return max(1, min(most, fit))


class Shares:
    """Each run's share of a GPU (1 / its runs per GPU), the task built once per task setting."""

    def __init__(self, per_gpu: str, gpu_bytes: int | None, cores_per_gpu: int):
        self.per_gpu, self.gpu_bytes, self.cores_per_gpu = per_gpu, gpu_bytes, cores_per_gpu
        self._tasks: dict = {}

    def number(self, cfg) -> int:
        if self.per_gpu != "auto":
            return int(self.per_gpu)
        from study.run.build import build_task
        key = (cfg.task, repr(cfg.task_config))
        if key not in self._tasks:
            self._tasks[key] = build_task(cfg)
        return runs_per_gpu(cfg, self._tasks[key], self.per_gpu, self.gpu_bytes,
                            self.cores_per_gpu)

    def __call__(self, cfg) -> float:
        return 1.0 / self.number(cfg)


def fits(load: float, share: float) -> bool:
    """Whether a run of `share` joins a GPU whose runs' shares add up to `load`."""
    return load + share <= 1.0 + 1e-9


def groups(numbers: list[int]) -> list[list[int]]:
    """Indices of consecutive runs packed together, each group as large as its runs' number
    allows (a run of number 1 alone): how `launcher=slurm` packs runs into array tasks."""
    out: list[list[int]] = []
    for i, n in enumerate(numbers):
        if out and numbers[out[-1][0]] == n and len(out[-1]) < n:
            out[-1].append(i)
        else:
            out.append([i])
    return out
