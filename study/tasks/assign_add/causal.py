"""The symbolic causal model of assign-and-add (Exoo et al. 2026): x = the value of the left
operand, y = the value of the right one, the answer (x + y) mod p. A number operand is its own
value; a variable operand takes the value assigned to it in the prefix (each operand variable
is assigned exactly once). `operands` resolves x and y from token ids; the counterfactual
pairs (`pairs`) intervene on them.
"""
from __future__ import annotations

import numpy as np

from study.tasks.assign_add.vocab import Layout


def assigned(ids: np.ndarray, layout: Layout) -> np.ndarray:
    """(n, seq_len) signed ids -> (n, V) value assigned to each variable in the prefix, -1 if
    unassigned."""
    n, P = ids.shape[0], ids.shape[1] - 4
    value_of = np.full((n, layout.n_vars), -1, dtype=np.int64)
    for j in range(P - 1):
        m = ids[:, j] >= layout.var0
        value_of[np.flatnonzero(m), ids[m, j] - layout.var0] = ids[m, j + 1]
    return value_of


def operands(ids: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(x (n,), y (n,)): the operand values of (n, seq_len) sequences, variables resolved from
    the prefix (the symbolic model's variables)."""
    ids = np.asarray(ids, dtype=np.int64)  # number tokens are values, tok - var0 an index
    value_of = assigned(ids, layout)  # (n, V)
    var0 = layout.var0
    out = []
    for tok in (ids[:, -3], ids[:, -2]):
        is_var = tok >= var0
        out.append(np.where(is_var, value_of[np.arange(len(tok)),
                                             np.where(is_var, tok - var0, 0)], tok))
    return out[0], out[1]
