"""Causal attention shared by the transformer families, and a switch that records its patterns.

Training runs the fused kernel (`scaled_dot_product_attention`, `is_causal=True`), which never
materialises the attention probabilities. Circuit analyses need them, so every attention
module derives from `CausalAttention`, and `capture_attention(model)` switches all of them to
an explicit softmax path that appends each layer's pattern to a list:

    with capture_attention(model) as patterns:
        logits = model(ids)
    patterns[l]  # (batch, n_heads, pos_query, pos_key), rows sum to 1, zero above the diagonal

One entry is appended per attention layer per forward call, in the order the layers run (so
after one call, `patterns[l]` is layer l). The explicit path gives the same outputs as the
fused one up to float rounding; the tensors keep their autograd graph when gradients are on.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn


class CausalAttention(nn.Module):
    """Base of the attention modules: `self.capture` is None, or the list patterns go to."""

    def __init__(self):
        super().__init__()
        self.capture: Optional[list] = None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               dropout_p: float = 0.0) -> torch.Tensor:
        """Causal softmax attention; q, k, v: (batch, n_heads, pos, d_head) -> same shape."""
        dropout_p = dropout_p if self.training else 0.0
        if self.capture is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        n_pos = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (batch, heads, pos, pos)
        future = torch.ones(n_pos, n_pos, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = scores.softmax(dim=-1, dtype=torch.float32)  # fp32 even under bf16 autocast
        self.capture.append(probs)
        probs = F.dropout(probs, p=dropout_p, training=self.training)
        return probs.to(v.dtype) @ v


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[list]:
    """Record every attention layer's (batch, n_heads, pos, pos) pattern during the block."""
    layers = [m for m in model.modules() if isinstance(m, CausalAttention)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no attention layers to capture")
    patterns: list = []
    try:
        for layer in layers:
            layer.capture = patterns
        yield patterns
    finally:
        for layer in layers:
            layer.capture = None
