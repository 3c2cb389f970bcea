"""The token roles of a counting sequence, the grid the atlas searches a variable over
(Grant et al. 2025 align the count at the demonstration and response positions).

A sequence is `B`, n demonstration tokens, the trigger `T`, n response tokens, `E`. The
roles, in the order of the sequence:
- `demo@i`: position i (i = 1..max_count), the i-th demonstration step (a void, where the
  sequence has voids, is a step too; counterfactual pairs have none);
- `trigger`: the `T`;
- `response@j`: the j-th response token (j = 1..max_count), at T's position + j.
A role past a sequence's own count is -1 there, and every role is -1 in a sequence without
its trigger or its end (the sequence an intervention on the phase generates can have
neither: the pair has no position for any role, and the atlas leaves it out of every cell).
"""
from __future__ import annotations

import numpy as np

from study.tasks.counting.vocab import ID

ROLE_NAMES = ("demo", "trigger", "response")


def token_roles(ids: np.ndarray, max_count: int) -> dict[str, np.ndarray]:
    """Role name -> (n,) int64 position in each sequence `ids` (n, S), -1 where absent."""
    ids = np.asarray(ids).astype(np.int64)
    whole = (ids == ID["T"]).any(1) & (ids == ID["E"]).any(1)  # (n,)
    trig = np.argmax(ids == ID["T"], axis=1)  # (n,)
    end = np.argmax(ids == ID["E"], axis=1)  # (n,)
    out: dict[str, np.ndarray] = {}
    for i in range(1, max_count + 1):
        out[f"demo@{i}"] = np.where(whole & (i < trig), i, -1)
    out["trigger"] = np.where(whole, trig, -1)
    for j in range(1, max_count + 1):
        out[f"response@{j}"] = np.where(whole & (trig + j < end), trig + j, -1)
    return {k: np.asarray(v, np.int64) for k, v in out.items()}
