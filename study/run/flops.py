"""How close a training loop runs to the machine: model FLOPs per position and a matmul peak.

`train_flops_per_position` counts the floating-point operations of one forward and backward
pass (torch's `FlopCounterMode`: matrix products, convolutions and attention, not the
elementwise work), divided by the positions of the batch, so that tokens/s times it is the
*model* FLOP/s a loop achieves on useful work (the usual "model FLOPs utilisation" measure:
padding a loop computes and throws away does not count). `matmul_peak` times a square matrix
product in the same process, with the same threads and dtype, as the ceiling to compare with.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from study.core.labels import IGNORE


def train_flops_per_position(model: torch.nn.Module, ids: torch.Tensor,
                             targets: torch.Tensor) -> float:
    """FLOPs of forward + backward on `ids` (batch, pos) against `targets` (batch, pos), per
    position. The model's gradients are cleared afterwards; dropout runs as in training."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.train()
    with FlopCounterMode(display=False) as counter:
        logits = model(ids)  # (batch, pos, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                               ignore_index=IGNORE)
        loss.backward()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return counter.get_total_flops() / ids.numel()


def matmul_peak(device: torch.device, dtype: torch.dtype = torch.float32,
                seconds: float = 1.0, n: int | None = None) -> float:
    """FLOP/s of an n x n matrix product (2 n^3 FLOPs) timed for about `seconds` in this
    process: the practical ceiling of the dense work a training step does."""
    from study.train.runtime import sync

    n = n or (4096 if device.type == "cuda" else 1024)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):  # warm-up: allocation, kernel selection, thread pool start
        a @ b
    sync(device)
    reps, t0 = 0, time.perf_counter()
    while True:
        for _ in range(4):
            a @ b
        reps += 4
        sync(device)
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return 2.0 * n ** 3 * reps / elapsed
