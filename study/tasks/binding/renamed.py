"""The renamed-letters control of binding programs [ours]: a letter's identity against its
role.

A source is its base with the letters consistently renamed by a permutation s of the task's
letters (every occurrence of a letter x written s(x), the query's too): each line keeps its
role, the chain the same lines and the answer the same digit. What changes is which letters
play the roles. A pair of kind `renamed:<variable>` (`query` or `referent`, `causal`) asks what
the base answers when the variable alone takes the source's letter, s(x) for the base's x:
- `renamed:query`: the base asked for s(q) instead of q;
- `renamed:referent`: the base whose query line copies s(r) instead of r.
That answer is the counterfactual label; s is drawn so that it differs from the base's answer
(so the pair is `changed`). An interchange that moves the letter's identity (the token, as a
site that copies its input holds it) gives the label; one that moves the role (which line
the variable points to, the same in base and renamed source) leaves the base's answer. DAS
scores the variable's trained alignments on these pairs without training them
(`study/analyses/das/controls.py`, table `das_renamed`).
"""
from __future__ import annotations

import numpy as np

from study.tasks.base import Pairs
from study.tasks.binding.causal import interpret
from study.tasks.binding.edits import draw, make_pairs, with_referent
from study.tasks.binding.vocab import LETTER0

TRIES = 8  # random permutations tried per program before it counts as admitting none


def rename(ids: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Programs `ids` (n, S) with letter x written perm[i, x] in row i (perm (n, m), a
    permutation of the first m letters); every other token kept."""
    ids = np.asarray(ids)
    tok = ids.astype(np.int64) - LETTER0
    m = perm.shape[1]
    is_letter = (tok >= 0) & (tok < m)
    new = np.take_along_axis(perm, np.clip(tok, 0, m - 1), 1) + LETTER0
    return np.where(is_letter, new, ids).astype(ids.dtype)


def _identity_programs(ids, p, variable: str, letter: np.ndarray) -> np.ndarray:
    """The base programs with `variable` alone set to `letter` (n,)."""
    if variable == "query":
        out = ids.copy()
        out[np.arange(len(ids)), 4 * p["n_lines"] + 1] = LETTER0 + letter
        return out
    return with_referent(ids, p, letter)


def _admits(ids, p, variable: str, perm: np.ndarray, free) -> tuple[np.ndarray, np.ndarray]:
    """Whether each program admits renaming `perm` (n, m) for `variable`, and the answer the
    identity label then holds (n,)."""
    rows = np.arange(len(ids))
    x = p[variable]
    new = perm[rows, np.clip(x, 0, None)]
    a = interpret(_identity_programs(ids, p, variable, new))["answer"]
    q_cf = new if variable == "query" else p["query"]
    ok = ((x >= 0) & (new != x) & (a >= 0) & (a != p["answer"])
          & free[q_cf, np.clip(a, 0, 9)]  # the identity program's combination
          & free[perm[rows, p["query"]], p["answer"]])  # the renamed source's own
    if variable == "referent":
        ok &= new != p["query"]
    return ok, a


def renamed_pairs(ex, p, kind: str, n: int, split: str, rng, free, letters: int) -> Pairs:
    """n `renamed:<variable>` pairs from the split's programs `ex` (interpreted as `p`)."""
    variable = kind.partition(":")[2]
    sub = lambda rows: {k: v[rows] for k, v in p.items()}  # noqa: E731
    perms = {}

    def options(rows):  # (len(rows), TRIES): which drawn permutation each program admits
        perm = np.argsort(rng.random((len(rows), TRIES, letters)), axis=2)
        ok = np.stack([_admits(ex.ids[rows], sub(rows), variable, perm[:, t], free)[0]
                       for t in range(TRIES)], 1)
        perms.update({int(r): perm[i] for i, r in enumerate(rows)})
        return ok

    idx, ok = draw(rng, np.flatnonzero(p[variable] >= 0), n, options, kind, split)
    first = np.argmax(ok, 1)
    perm = np.stack([perms[int(r)][t] for r, t in zip(idx, first)])  # (n, letters)
    pb = sub(idx)
    base = ex.ids[idx]
    good, answer = _admits(base, pb, variable, perm, free)
    src = rename(base, perm)
    ps = interpret(src)
    if not good.all() or (ps["answer"] != pb["answer"]).any() or (
            ps["depth"] != pb["depth"]).any():
        raise RuntimeError(f"binding {kind} pair broke its causal contract")
    value = perm[np.arange(n), pb[variable]]
    strata = {"depth": pb["depth"], "root_line": pb["root_line"], "source_depth": ps["depth"],
              "value": value.astype(np.int64)}
    return make_pairs(kind, ex, idx, base, src, pb["n_lines"], answer, strata)
