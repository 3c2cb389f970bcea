"""The `resolved` pairs of binding programs [ours, after Wu, Geiger, Millière 2025]: the value
a line's letter resolves to, intervened at that line.

Wu et al. trace the answer along the query chain's right-hand tokens hop by hop; the value a
copy line `x=y` resolves to (y's value, `causal.interpret`'s `line_value`) can be computed at
that line, before the query is read. There a network cannot know which letter is queried,
so the answer does not determine the variable; at `:`, where every pair kind of `pairs` is
read, each variable that fixes the answer is a function of it.

A pair picks a copy line i of the base (its right-hand token a letter) and changes the digit
its chain starts from (`line_root`, an earlier line), to another digit: the source is the
base with that one digit changed, so line i resolves to the new digit there and the token
at line i is the base's. The intervention sits at line i's right-hand token in base and
source (`base_pos = source_pos = 4 i + 2`, the layouts are the same). Its label comes from
the causal model: the base run with line i's letter bound to the source's value, i.e. the
base program with line i's right-hand token replaced by that digit. The answer changes only
where the query's chain runs through line i; elsewhere the label is the base's answer and
the pair is unchanged (`Pairs.changed`), and the source's own answer may still change (the
query chain and line i's may share the digit), so neither answer decides the variable.
Half the pairs take a line on the query's chain, half one off it (where the split has
both), so that half the pairs change the answer.
The new digit never makes a held-out (query letter, answer digit) combination, in the
source's answer or the label.

Strata: `depth`, `root_line` (the base's query chain), `source_depth` (the source's query
chain: the base's, as the structure is unchanged), `line` (i), `line_depth` (hops from line i
back to its digit), `on_chain` (the query's chain runs through line i: the label changes),
and `value`, the digit line i resolves to in the source.
"""
from __future__ import annotations

import numpy as np

from study.core.errors import UsageError
from study.tasks.base import Pairs
from study.tasks.binding.causal import interpret, on_chain
from study.tasks.binding.edits import draw, make_pairs
from study.tasks.binding.vocab import DIGIT0


def copy_lines(p: dict) -> np.ndarray:
    """(n, L) bool: the lines that copy a letter (their right-hand token is a letter)."""
    return (p["line_value"] >= 0) & ~p["is_const"]


def with_line_value(ids: np.ndarray, line: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Programs `ids` (n, S) with line `line` (n,) assigning the digit `value` (n,): what the
    base computes with that line's letter bound to `value` (sequential semantics)."""
    out = ids.copy()
    out[np.arange(len(ids)), 4 * np.asarray(line) + 2] = DIGIT0 + np.asarray(value)
    return out


def resolved_pairs(ex, p, n, split, rng, free) -> Pairs:
    """`resolved` pairs from programs `ex` of `split` (interpreted: `p`), see the module doc.
    `free` (26, 10) bool: the (query letter, answer digit) combinations a pair may create."""
    copies, chain = copy_lines(p), on_chain(p)  # (N, L) each
    buckets = [copies & chain, copies & ~chain]  # lines through which the answer changes, not
    have = [b for b in buckets if b.any()]
    if not have:
        raise UsageError(f"split {split!r} has no program that admits a resolved pair")
    sizes = [n // len(have) + (i < n % len(have)) for i in range(len(have))]
    idx, line = [], []
    for options, m in zip(have, sizes):
        if not m:
            continue
        rows, opts = draw(rng, np.flatnonzero(options.any(1)), m, lambda r, o=options: o[r],
                          "resolved", split)
        idx.append(rows)
        line.append(np.argmax(np.where(opts, rng.random(opts.shape), -1), 1))
    idx, line = np.concatenate(idx), np.concatenate(line)
    order = np.argsort(idx, kind="stable")
    idx, line = idx[order], line[order]
    pb = {k: v[idx] for k, v in p.items()}
    rows = np.arange(n)
    root = pb["line_root"][rows, line]
    old = pb["digit"][rows, root]
    allowed = (np.arange(10)[None, :] != old[:, None]) & free[pb["query"]]
    new = np.argmax(np.where(allowed, rng.random((n, 10)), -1), 1)
    base = ex.ids[idx]
    src = base.copy()
    src[rows, 4 * root + 2] = DIGIT0 + new
    ps = interpret(src)
    label = interpret(with_line_value(base, line, new))["answer"]
    through = chain[idx, line]
    if ((ps["line_value"][rows, line] != new).any() or (ps["depth"] != pb["depth"]).any()
            or ((label != pb["answer"]) != through).any()):
        raise RuntimeError("binding resolved pair broke its causal contract")
    strata = {"depth": pb["depth"], "root_line": pb["root_line"], "source_depth": ps["depth"],
              "line": line.astype(np.int64), "line_depth": pb["line_depth"][rows, line],
              "on_chain": through, "value": new.astype(np.int64)}
    return make_pairs("resolved", ex, idx, base, src, pb["n_lines"], label, strata,
                      pos=4 * line + 2)


def resolved_answer(base: np.ndarray, line: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(n,) the answer of each base (n, S) with line `line` resolving to `values` (n,)."""
    return interpret(with_line_value(base, line, values))["answer"]
