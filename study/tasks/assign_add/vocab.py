"""Tokens of assign-and-add sequences (Exoo et al. 2026) and where they sit.

Token ids [paper, `bexoo/assign-and-add/train.py`]: a number's id is the number itself
(0..p-1), then `+`, `=`, `PAD`, then the variables a.. (`n_vars` of them) from `var0`.
A sequence is `seq_len` tokens: positions 0..P-1 (P = seq_len - 4) hold the assignments
`[var, value]` and PADs; the core `+ lhs rhs =` closes every sequence, so `+` is at P, the
operands at P+1 and P+2 and `=` (where the answer is read out) at P+3.

Forms (the authors' `typ`, our stratum `form`): which operands are variables.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FORMS = ("+n n", "+v n", "+n v", "+v v")  # index = stratum `form` = the authors' `typ`
LEFT_VAR = np.array([False, True, False, True])  # form -> the left operand is a variable
RIGHT_VAR = np.array([False, False, True, True])  # form -> the right operand is a variable


@dataclass(frozen=True)
class Layout:
    """The token ids of one config: modulus `p`, `n_vars` variables."""

    p: int
    n_vars: int

    @property
    def var_names(self) -> tuple[str, ...]:
        return tuple(chr(ord("a") + i) for i in range(self.n_vars))

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token, in id order."""
        return (*map(str, range(self.p)), "+", "=", "PAD", *self.var_names)

    @property
    def plus_id(self) -> int:
        return self.p

    @property
    def eq_id(self) -> int:
        return self.p + 1

    @property
    def pad_id(self) -> int:
        return self.p + 2

    @property
    def var0(self) -> int:
        """Id of the first variable `a`; variable i is var0 + i."""
        return self.p + 3
