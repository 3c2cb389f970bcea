"""The token roles of a binding program, the grid the atlas searches a variable over (Wu,
Geiger, Millière 2025 trace the value at the program's token positions across layers).

A program of n lines is, line i (from 0) at positions 4i..4i+3, `x`, `=`, `y`, newline, then
the query `#`, `q`, `:` at 4n..4n+2. The roles, in the order of the sequence:
- `letter@i`, `eq@i`, `rhs@i`, `newline@i`: line i's left-hand letter, its `=`, its
  right-hand token (a digit or a letter) and its newline;
- `query_letter`: the `q` of `#q:`;
- `colon`: the `:`, where the answer is read out.
Programs of one split may differ in length (`gen_lines`): a line a program lacks is -1.
"""
from __future__ import annotations

import numpy as np

from study.tasks.binding.vocab import VOCAB

ROLE_NAMES = ("letter", "eq", "rhs", "newline", "query_letter", "colon")
_HASH = VOCAB.index("#")


def token_roles(ids: np.ndarray, max_lines: int) -> dict[str, np.ndarray]:
    """Role name -> (n,) int64 position in each program `ids` (n, S); lines 0..max_lines-1
    (the longest program's count if larger), -1 where a program has fewer."""
    ids = np.asarray(ids).astype(np.int64)
    if not (ids == _HASH).any(1).all():
        raise ValueError("a binding program without its query `#q:`")
    n_lines = np.argmax(ids == _HASH, axis=1) // 4  # (n,)
    top = max(int(max_lines), int(n_lines.max()) if len(n_lines) else 0)
    out: dict[str, np.ndarray] = {}
    for i in range(top):
        there = n_lines > i
        for offset, role in enumerate(ROLE_NAMES[:4]):
            out[f"{role}@{i}"] = np.where(there, 4 * i + offset, -1)
    out["query_letter"] = 4 * n_lines + 1
    out["colon"] = 4 * n_lines + 2
    return {k: np.asarray(v, np.int64) for k, v in out.items()}
