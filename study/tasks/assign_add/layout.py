"""The token roles of an assign-and-add sequence, the grid the atlas searches a variable
over (Exoo et al. 2026 read the operands at the core and the variables at their
assignments).

A sequence is `seq_len` tokens: positions 0..P-1 (P = seq_len - 4) hold the assignments
`[var, value]` among PADs, then the core `+ lhs rhs =`. The roles, in the order of the
sequence:
- `var@j`, `value@j`: the j-th assignment's variable and its value (j from 0, in the order
  they appear), -1 past a sequence's own assignments;
- `plus`, `lhs`, `rhs`, `eq`: the core's `+`, its left and right operands, and the `=` where
  the answer is read out.
"""
from __future__ import annotations

import numpy as np

from study.tasks.assign_add.vocab import Layout

ROLE_NAMES = ("var", "value", "plus", "lhs", "rhs", "eq")


def token_roles(ids: np.ndarray, layout: Layout, max_assign: int) -> dict[str, np.ndarray]:
    """Role name -> (n,) int64 position in each sequence `ids` (n, S), -1 where absent."""
    ids = np.asarray(ids).astype(np.int64)
    n, S = ids.shape
    P = S - 4
    is_var = ids[:, :P] >= layout.var0  # (n, P): an assignment's variable
    rank = np.cumsum(is_var, axis=1) - 1  # (n, P): which assignment it is
    out: dict[str, np.ndarray] = {}
    for j in range(max_assign):
        hit = is_var & (rank == j)
        pos = np.where(hit.any(1), np.argmax(hit, axis=1), -1)
        out[f"var@{j}"] = pos
        out[f"value@{j}"] = np.where(pos >= 0, pos + 1, -1)
    for offset, role in enumerate(ROLE_NAMES[2:]):
        out[role] = np.full(n, P + offset)
    # order the roles as they sit in a sequence: the assignments' pairs, then the core
    names = [f"{r}@{j}" for j in range(max_assign) for r in ROLE_NAMES[:2]] + list(ROLE_NAMES[2:])
    return {k: np.asarray(out[k], np.int64) for k in names}
