"""The FLOP count behind `bench train`'s fraction of peak."""
import math

import torch
from torch import nn

from study.run.flops import matmul_peak, train_flops_per_position


class _Bigram(nn.Module):
    """Embedding then one linear map: forward 2*d*v FLOPs a position, backward 4*d*v."""

    def __init__(self, v: int, d: int):
        super().__init__()
        self.embed, self.out = nn.Embedding(v, d), nn.Linear(d, v)

    def forward(self, ids):
        return self.out(self.embed(ids))


def test_flops_per_position_count_forward_and_backward_matmuls():
    v, d = 11, 24
    model = _Bigram(v, d)
    ids = torch.randint(v, (5, 7))
    per_position = train_flops_per_position(model, ids, ids)
    assert per_position == 6 * d * v
    assert all(p.grad is None for p in model.parameters())  # gradients left clean


def test_matmul_peak_is_a_finite_rate():
    peak = matmul_peak(torch.device("cpu"), seconds=0.05, n=128)
    assert math.isfinite(peak) and peak > 1e6  # any CPU multiplies faster than 1 MFLOP/s
