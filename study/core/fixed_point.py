"""Feeding a causal network its own outputs by passes to a fixed point.

Where `feed` (B, L) is set, the input at t is to be the network's argmax at t-1. A causal
network's fed tokens settle left to right: each pass without gradients recomputes every
prediction from the current inputs and writes them into the fed positions, and once a pass
changes nothing the inputs are exactly those a step-by-step unroll would have fed. Used by
the training engine for any network (`study/train/feed.py`) and by the recurrent networks'
fused kernel (`study/models/nets/rnn.py`).
"""
from __future__ import annotations

from typing import Callable

import torch


def settle_inputs(predict: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor,
                  feed: torch.Tensor, passes: int) -> tuple[torch.Tensor, bool]:
    """`predict`: (B, L) ids -> (B, L) argmax tokens. Returns the ids with every fed position
    replaced after at most `passes` passes without gradients, and whether a pass confirmed
    the fixed point."""
    cur = ids
    with torch.no_grad():
        for _ in range(passes):
            pred = predict(cur)  # (B, L)
            nxt = cur.clone()
            nxt[:, 1:] = torch.where(feed[:, 1:], pred[:, :-1], ids[:, 1:])
            if torch.equal(nxt, cur):
                return cur, True
            cur = nxt
    return cur, False
