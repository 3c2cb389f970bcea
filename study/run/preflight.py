"""Checks of a resolved run config against this machine, made at parse time so that a command
that cannot run is refused in one line before any run directory is created:

- the device `runtime.device` names exists (`cuda` on a machine without one, `cuda:3` on a
  machine with one GPU);
- the task's data fits in memory (`check_data`, before the task is built: its config's
  `data_bytes`);
- training fits in memory: a coarse upper bound (`study/core/memory.py`) against the host's
  memory, or the GPU's when training runs on one. The setting to change is named: the batch
  size, or the model's widths when its parameters alone do not fit.

torch is imported only when the answer depends on it (a CUDA device named, or `auto` on a
machine with an NVIDIA driver, where a GPU that torch cannot use is refused in one line naming
the cause instead of training on the CPU unannounced), so runs on CPU machines parse fast.
"""
from __future__ import annotations

import os

from study.core.errors import UsageError
from study.core.memory import GIB, gib, host_memory, training_bytes

SMALL = 1 * GIB  # below this any machine that runs Python fits a training step: no look-up


def check(cfg, task) -> None:
    """Refuse `cfg` (a RunConfig) with a UsageError if this machine cannot train it."""
    train = cfg.train
    params, acts = training_bytes(cfg.model_config, train.batch_size, task.seq_len, len(task.vocab))
    device = None
    if train.device != "cpu" and (train.device != "auto" or nvidia_driver_loaded()):
        from study.train.runtime import resolve_device
        device = resolve_device(train.device)  # a UsageError names the setting and the cause
    if params + acts <= SMALL:
        return
    limit, where = _limit(device)
    if limit is None or params + acts <= limit:
        return
    shape = f"model={cfg.model} on task={cfg.task} (seq_len {task.seq_len}; a coarse estimate)"
    if params > limit:
        raise UsageError(f"model={cfg.model}'s parameters with their gradients and optimiser "
                         f"state need about {gib(params)}, more than the {gib(limit)} of {where}; "
                         f"choose smaller model.* widths or layers")
    per_example = acts / train.batch_size
    fits = int((limit - params) // per_example)
    raise UsageError(f"train.batch_size={train.batch_size} needs about {gib(params + acts)} to train "
                     f"{shape}, more than the {gib(limit)} of {where}; lower train.batch_size "
                     f"(at most about {fits:,} fits)")


def check_data(task: str, task_config) -> None:
    """Refuse, before the task is built, data that would not fit in this machine's memory:
    the task config's own coarse estimate (`data_bytes`, where it offers one) against the
    host's memory, naming the sizes given above their defaults (`task.n_train=...`)."""
    estimate = getattr(task_config, "data_bytes", None)
    if estimate is None:
        return
    need = estimate()
    if need <= SMALL:
        return
    limit = host_memory()
    if limit is None or need <= limit:
        return
    import dataclasses
    raised = [f"task.{f.name}={getattr(task_config, f.name):,}"
              for f in dataclasses.fields(task_config)
              if isinstance(f.default, int) and not isinstance(f.default, bool)
              and isinstance(getattr(task_config, f.name), int)
              and getattr(task_config, f.name) > f.default]
    raise UsageError(f"task={task}'s data needs about {gib(need)} to generate and hold (a coarse "
                     f"estimate), more than the {gib(limit)} of memory on this machine; lower "
                     f"{', '.join(raised) or 'the task.* sizes'}")


def nvidia_driver_loaded() -> bool:
    """Whether `auto` may pick a GPU: only where an NVIDIA driver is loaded."""
    return os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidiactl")


def _limit(device) -> tuple[int | None, str]:
    """(bytes of memory, how to name it) of the device training will use."""
    if device is not None and device.type == "cuda":
        import torch
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        return props.total_memory, f"GPU memory on cuda:{index} ({props.name})"
    return host_memory(), "memory on this machine"
