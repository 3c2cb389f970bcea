"""Counterfactual (base, source) pairs of variable-binding programs (Wu, Geiger, Millière 2025).

Kinds (aligned: base and source differ in one token, `base_pos = source_pos = -1`):
`root_value` (the query chain's digit changes: the answer follows), `distractor` (a digit off
the chain changes: the answer stays), `query` (the queried letter becomes another letter with
a different value). Pairs come from programs of the split asked for, and a new answer is
never a held-out (query letter, answer digit) combination outside `gen_heldout_combos`.
Strata: `depth`, `root_line`, and `source_depth` for `query`.
"""
from __future__ import annotations

import numpy as np

from study.core.errors import UsageError
from study.tasks.base import IGNORE, Pairs
from study.tasks.binding.causal import interpret
from study.tasks.binding.vocab import DIGIT0, LETTER0


def counterfactuals(task, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
    """n pairs of `kind` from programs of `split` of a `BindingTask`, a pure function of
    (config, kind, n, split, seed)."""
    if kind not in task.counterfactual_kinds:
        raise UsageError(f"counterfactual kind {kind!r} is not one of binding's: "
                         f"{', '.join(task.counterfactual_kinds)}")
    if n < 1:
        raise UsageError(f"n={n}: ask for at least 1 pair")
    ex = task.split(split)
    p = interpret(ex.ids)
    rng = task.generator.rng("pairs", kind, split, seed)
    free = ~task.heldout if split != "gen_heldout_combos" else np.ones((26, 10), bool)
    N = len(ex)
    lines = np.arange(p["is_const"].shape[1])[None, :]
    if kind == "distractor":  # digits whose value cannot reach the query
        options = p["is_const"] & (lines != p["root_line"][:, None])
    elif kind == "query":  # assigned letters with another value, not a held-out combo
        v = p["value"]  # (N, 26)
        options = ((v >= 0) & (v != p["answer"][:, None])
                   & free[np.arange(26)[None], np.clip(v, 0, 9)])
    else:
        options = np.ones((N, 1), bool)
    eligible = np.flatnonzero(options.any(1))
    if not len(eligible):
        raise UsageError(f"split {split!r} has no program that admits a {kind} pair")
    idx = np.sort(rng.choice(eligible, n, replace=n > len(eligible)))
    rows = np.arange(n)
    base = ex.ids[idx]
    src = base.copy()
    pick = np.argmax(np.where(options[idx], rng.random(options[idx].shape), -1), 1)
    q, ans = p["query"][idx], p["answer"][idx]
    if kind == "query":
        src[rows, 4 * p["n_lines"][idx] + 1] = LETTER0 + pick
    else:
        line = p["root_line"][idx] if kind == "root_value" else pick
        old = p["digit"][idx, line]
        allowed = np.arange(10)[None, :] != old[:, None]
        if kind == "root_value":  # the new answer must not be a held-out combination
            allowed &= free[q]
        new = np.argmax(np.where(allowed, rng.random((n, 10)), -1), 1)
        src[rows, 4 * line + 2] = DIGIT0 + new
    ps = interpret(src)
    expected = ans if kind == "distractor" else ps["answer"]
    if (ps["answer"] != ans).any() if kind == "distractor" else (ps["answer"] == ans).any():
        raise RuntimeError(f"binding {kind} pair broke its causal contract")
    cf = np.full(base.shape, IGNORE, np.int8)
    cf[rows, 4 * p["n_lines"][idx] + 2] = DIGIT0 + expected
    strata = {"depth": p["depth"][idx], "root_line": p["root_line"][idx]}
    if kind == "query":
        strata["source_depth"] = ps["depth"]
    aligned = np.full(n, -1, np.int64)
    return Pairs(kind, base, src, ex.labels[idx], cf, aligned, aligned.copy(), strata)
