"""Counterfactual (base, source) pairs of variable-binding programs (Wu, Geiger, Millière 2025).

Kinds (aligned: base and source have the same layout, `base_pos = source_pos = -1`):
- `root_value`: the query chain's digit changes; the answer follows;
- `distractor`: a digit off the chain changes; the answer stays;
- `query`: the queried letter becomes another letter with a different value;
- `referent` [ours]: on programs whose query line copies a letter (`q=r`, chains of two or
  more hops), r becomes another letter bound before that line to a different value; the
  query letter stays and the answer changes (`causal`: the variable no token at `:` carries);
- `resolved` [ours] (`resolved`): the digit an earlier line of line i's chain assigns
  changes, so line i resolves to another value; the intervention sits at line i's
  right-hand token (base_pos = source_pos = 4 i + 2, not aligned at `:`), and the answer
  changes only where the query's chain runs through line i;
- `renamed:query`, `renamed:referent` [ours]: the renamed-letters control (`renamed`): the
  source is the base with its letters consistently permuted, so every line plays the same
  role and the answer is the same, but the variable's letter is another one. The
  counterfactual label is what the base answers when the variable alone takes the source's
  letter (its identity): a site that holds the letter follows it, a site that holds the
  role (which line, resolved) keeps the base's answer.
The one-token kinds (and `resolved`) differ in one token. Pairs come from programs of the
split asked for, and an answer a pair creates is never a held-out (query letter, answer
digit) combination outside `gen_heldout_combos`. A source's query chain is never deeper
than the trained depth (the task's `max_depth`, or the base's own depth where deeper:
`source_depth_limit`) [ours]: `query` and `referent` pairs draw only such letters; the other
kinds keep the base's chain.

Strata: `depth`, `root_line`; `source_depth` (the source's query chain, every kind, so
that every IIA can be split by it); `resolved`'s own (`line`, `line_depth`, `on_chain`,
`study/tasks/binding/resolved.py`); and `value`, the
value the changed variable carries in the source, which the shuffled-variable control of DAS
matches on (`study/analyses/das/controls.py`): the new digit (`root_value`, `distractor`),
the source's query letter (`query`, `renamed:query`) or referent letter (`referent`,
`renamed:referent`), as a letter index, or the digit line i resolves to (`resolved`).
"""
from __future__ import annotations

import numpy as np

from study.core.errors import UsageError
from study.tasks.base import IGNORE, Pairs
from study.tasks.binding.causal import interpret
from study.tasks.binding.edits import draw, make_pairs, with_referent
from study.tasks.binding.renamed import renamed_pairs
from study.tasks.binding.resolved import resolved_answer, resolved_pairs
from study.tasks.binding.vocab import DIGIT0, LETTER0

ONE_TOKEN = ("root_value", "distractor", "query", "referent")


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
    limit = source_depth_limit(task.config.max_depth, p["depth"])  # (N,)
    if kind.startswith("renamed:"):
        return renamed_pairs(ex, p, kind, n, split, rng, free, task.config.n_letters)
    if kind == "resolved":
        return resolved_pairs(ex, p, n, split, rng, free)
    if kind == "referent":
        return _referent(ex, p, n, split, rng, free, task.config.n_letters, limit)
    N = len(ex)
    lines = np.arange(p["is_const"].shape[1])[None, :]
    if kind == "distractor":  # digits whose value cannot reach the query
        options = p["is_const"] & (lines != p["root_line"][:, None])
    elif kind == "query":  # assigned letters with another value, not a held-out combo
        v = p["value"]  # (N, 26)
        options = ((v >= 0) & (v != p["answer"][:, None])
                   & free[np.arange(26)[None], np.clip(v, 0, 9)]
                   & (p["letter_depth"] <= limit[:, None]))  # a source inside the depth
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
        value = pick
    else:
        line = p["root_line"][idx] if kind == "root_value" else pick
        old = p["digit"][idx, line]
        allowed = np.arange(10)[None, :] != old[:, None]
        if kind == "root_value":  # the new answer must not be a held-out combination
            allowed &= free[q]
        new = np.argmax(np.where(allowed, rng.random((n, 10)), -1), 1)
        src[rows, 4 * line + 2] = DIGIT0 + new
        value = new
    ps = interpret(src)
    expected = ans if kind == "distractor" else ps["answer"]
    if (ps["answer"] != ans).any() if kind == "distractor" else (ps["answer"] == ans).any():
        raise RuntimeError(f"binding {kind} pair broke its causal contract")
    if (ps["depth"] > limit[idx]).any():
        raise RuntimeError(f"binding {kind} pair has a source deeper than the trained depth")
    strata = {"depth": p["depth"][idx], "root_line": p["root_line"][idx],
              "source_depth": ps["depth"], "value": np.asarray(value, np.int64)}
    return make_pairs(kind, ex, idx, base, src, p["n_lines"][idx], expected, strata)


def source_depth_limit(max_depth: int, depth: np.ndarray) -> np.ndarray:
    """(n,) the deepest query chain a source may have for bases of query depth `depth`
    (n,): the trained depth `max_depth` (the task's), or the base's own where deeper (the
    `gen_hops` split). A network trained on chains of at most 2 hops is never asked to
    follow a 3-hop source [ours]."""
    return np.maximum(max_depth, np.asarray(depth, np.int64))


def referent_options(ids, p, letters: int, free,
                     limit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For programs whose query line copies a letter: which letters c (n, letters) may
    replace that letter (bound before the line, to another value than the answer, neither
    the query letter nor the referent, not making a held-out combination, and giving a
    query chain of at most `limit` (n,) hops, where given) and the answer each gives
    (n, letters), -1 where none."""
    n = len(ids)
    ok = np.zeros((n, letters), bool)
    answers = np.full((n, letters), -1, np.int64)
    copies = p["referent"] >= 0
    for c in range(letters):
        got = interpret(with_referent(ids, p, np.full(n, c)))
        a = got["answer"]
        answers[:, c] = a
        ok[:, c] = (copies & (a >= 0) & (a != p["answer"]) & (c != p["query"])
                    & (c != p["referent"]) & free[p["query"], np.clip(a, 0, 9)])
        if limit is not None:
            ok[:, c] &= got["depth"] <= limit
    return ok, answers


def _referent(ex, p, n, split, rng, free, letters, limit) -> Pairs:
    """`referent` pairs: the letter the query's line copies changes (see the module doc),
    the source's chain at most `limit` (N,) hops (`source_depth_limit`)."""
    pool = np.flatnonzero(p["referent"] >= 0)
    sub = lambda rows: {k: v[rows] for k, v in p.items()}  # noqa: E731
    idx, options = draw(rng, pool, n, lambda rows: referent_options(
        ex.ids[rows], sub(rows), letters, free, limit[rows])[0], "referent", split)
    pb = sub(idx)
    pick = np.argmax(np.where(options, rng.random(options.shape), -1), 1)
    base = ex.ids[idx]
    src = with_referent(base, pb, pick)
    ps = interpret(src)
    if (ps["answer"] == pb["answer"]).any() or (ps["query"] != pb["query"]).any() or (
            ps["referent"] != pick).any() or (ps["depth"] > limit[idx]).any():
        raise RuntimeError("binding referent pair broke its causal contract")
    strata = {"depth": pb["depth"], "root_line": pb["root_line"], "source_depth": ps["depth"],
              "value": pick.astype(np.int64)}
    return make_pairs("referent", ex, idx, base, src, pb["n_lines"], ps["answer"], strata)


def value_labels(pairs: Pairs, values: np.ndarray) -> np.ndarray:
    """Labels (n, width) of each base of `pairs` with the pairs' variable set to `values`
    ((n,), the `value` stratum's codes): the answer at `:` of the base program with that
    query letter (`query`, `renamed:query`), referent letter (`referent`,
    `renamed:referent`), chain digit (`root_value`) or value line i (the `line` stratum)
    resolves to (`resolved`); a distractor's digit leaves it."""
    base = np.asarray(pairs.base_ids)
    p = interpret(base)
    values = np.asarray(values, np.int64)
    variable = pairs.kind.partition(":")[2] or pairs.kind
    if variable == "query":
        ids = base.copy()
        ids[np.arange(len(base)), 4 * p["n_lines"] + 1] = LETTER0 + values
        answer = interpret(ids)["answer"]
    elif variable == "referent":
        answer = interpret(with_referent(base, p, values))["answer"]
    elif variable == "root_value":
        answer = values
    elif variable == "resolved":
        answer = resolved_answer(base, pairs.strata["line"], values)
    else:  # distractor
        answer = p["answer"]
    out = np.full(base.shape, IGNORE, np.int8)
    # a letter bound to nothing gives no answer: IGNORE, which no label equals
    out[np.arange(len(base)), 4 * p["n_lines"] + 2] = np.where(answer >= 0, DIGIT0 + answer,
                                                               IGNORE)
    return out
