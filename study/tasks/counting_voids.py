"""Void tokens in the counting task's demonstration phase (Grant, Goodman & McClelland 2025).

The authors' causal model emits, at every step of the demonstration phase, a void token `U`
with probability `unk_p` and otherwise what the phase calls for: a demo token, or the
trigger once the demos are complete (`grantsrb/mas/causal_models.py`, `CountUpDown.
get_token`: `if np.random.random() < varbs["unk_p"]: return unk_token_id`). A void leaves
every count unchanged and is never scored (task mask 0). So the demonstration phase of a
sequence of count n is n demo tokens and the trigger, count + 1 "real" emissions, with a
void before each of them, each independently, until the real one comes: voids may precede
the first demo and follow the last demo before the trigger.

[ours] Sequences need a bounded length: a row drawing more than `max_voids` voids is drawn
again (at p = 0.2 and n = 20 that is about one row in 10**7 at max_voids = 20).
"""
from __future__ import annotations

import numpy as np

VOID, REAL = 0, 1


def demo_phase(counts: np.ndarray, void_p: float, max_voids: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Layout of the demonstration phase (after `B`, through `T`) of each row.

    counts (n,) -> (is_void (n, W) bool, trig_pos (n,) int64): is_void marks the voids among
    the first W = max(counts) + 1 + max_voids emissions; the emission at trig_pos is the
    trigger, the real ones before it are the demos, and nothing after it is demo phase."""
    n = len(counts)
    width = int(counts.max()) + 1 + max_voids
    is_void = np.zeros((n, width), bool)
    trig = np.zeros(n, np.int64)
    todo = np.arange(n)
    while todo.size:  # rows with too many voids are drawn again [ours]
        draw = rng.random((todo.size, width)) < void_p  # (m, W)
        real_rank = np.cumsum(~draw, axis=1)  # real emissions up to and including j
        hit = (real_rank == counts[todo, None] + 1) & ~draw  # the trigger's emission
        at = np.argmax(hit, axis=1)  # (m,) its index, when there is one
        ok = hit.any(axis=1) & (at - counts[todo] <= max_voids)  # voids before it
        is_void[todo[ok]] = draw[ok]
        trig[todo[ok]] = at[ok]
        todo = todo[~ok]
    is_void &= np.arange(width)[None, :] < trig[:, None]  # nothing after the trigger
    return is_void, trig
