"""Edits of binding programs (Wu, Geiger, Millière 2025) and the assembly of aligned pairs,
shared by the pair kinds (`pairs`, `renamed`): drawing the programs that admit an edit,
setting the letter a query's line copies, and the `Pairs` of bases and edited sources.
"""
from __future__ import annotations

import numpy as np

from study.core.errors import UsageError
from study.tasks.base import IGNORE, Pairs
from study.tasks.binding.causal import interpret
from study.tasks.binding.vocab import DIGIT0, LETTER0


def make_pairs(kind: str, ex, idx, base, src, n_lines, expected, strata,
               pos: np.ndarray | None = None) -> Pairs:
    """`Pairs` of bases `ex.take(idx)` (ids `base`) and sources `src` (labelled with their
    own answers, `source_labels`), the counterfactual answer `expected` (n,) at each base's
    `:`; aligned (positions -1), or intervened at `pos` (n,) in base and source alike (their
    layouts are the same)."""
    n = len(idx)
    cf = np.full(base.shape, IGNORE, np.int8)
    cf[np.arange(n), 4 * n_lines + 2] = DIGIT0 + expected
    own = np.full(base.shape, IGNORE, np.int8)  # the source's own answer at its `:`
    answer = interpret(src)["answer"]
    own[np.arange(n), 4 * n_lines + 2] = np.where(answer >= 0, DIGIT0 + answer, IGNORE)
    at = np.full(n, -1, np.int64) if pos is None else np.asarray(pos, np.int64)
    return Pairs(kind, base, src, ex.labels[idx], cf, at, at.copy(), strata, own)


def draw(rng, pool: np.ndarray, n: int, options_of, kind: str, split: str):
    """Rows of `pool` (indices of a split's programs) that admit a pair, n of them: the pool
    is visited in a seeded order, in chunks, and `options_of(rows)` -> (len(rows), m) bool
    says which of m choices each row admits. Returns (rows (n,), their options (n, m)); with
    fewer admissible rows than n, rows repeat (drawn from those found)."""
    order = rng.permutation(pool)
    got, opts, have = [], [], 0
    chunk = 2 * n + 64
    for lo in range(0, len(order), chunk):
        rows = order[lo:lo + chunk]
        o = options_of(rows)
        ok = o.any(1)
        got.append(rows[ok])
        opts.append(o[ok])
        have += int(ok.sum())
        if have >= n:
            break
    rows = np.concatenate(got) if got else np.zeros(0, np.int64)
    if not len(rows):
        raise UsageError(f"split {split!r} has no program that admits a {kind} pair")
    o = np.concatenate(opts)
    take = np.arange(n) if len(rows) >= n else rng.choice(len(rows), n, replace=True)
    order = np.argsort(rows[take], kind="stable")
    return rows[take][order], o[take][order]


def with_referent(ids: np.ndarray, p: dict, letter: np.ndarray) -> np.ndarray:
    """Programs `ids` (n, S) with the right-hand letter of the query's own line set to
    `letter` (n,) letter indices."""
    out = ids.copy()
    out[np.arange(len(ids)), 4 * p["query_line"] + 2] = LETTER0 + letter
    return out
