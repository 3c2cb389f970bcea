"""The symbolic causal model of binding programs (Wu, Geiger, Millière 2025): sequential
Python semantics, run on token arrays, and the shallow rules an answer can be mistaken for.

`interpret` runs programs and says, per program, line and letter, what each binding holds
and which line it came from; the query chain (`chain_lines`, `on_chain`) is the path of copies the answer
follows back to its digit.

Causal variables (what DAS aligns and the pairs change, `pairs`):
- `root_value`: the chain's digit, i.e. the answer;
- `query`: the queried letter, the `q` of `#q:`, one token before `:` where the answer is
  read out;
- `referent` [ours]: on chains of two or more hops, the letter the query's own assignment
  copies (`q=r`: r). No token at `:` or just before it carries it: to hold it there a network
  must have looked the query up, one hop. Its pairs change r and keep q, so a site that only
  copies the query letter cannot follow them, and the answer changes with r.
- `resolved` [ours]: per line, the value the line's letter holds right after it
  (`line_value`), read at that line, before the query is. There a network cannot know which
  letter will be queried, so the answer does not determine it: setting line i's value
  changes the answer only where the query's chain runs through line i. Its pairs
  (`resolved`) change an earlier binding of line i's chain and intervene at line i.
The shallow
rules (`heuristic_predictions`) are the shortcuts the generator rejects programs for and the
`heuristics` table scores.
"""
from __future__ import annotations

import numpy as np

from study.tasks.binding.vocab import DIGIT0, LETTER0, NL

HEURISTICS = ("first_line_constant", "last_constant", "most_frequent_digit", "nearest_constant")


def interpret(ids: np.ndarray) -> dict[str, np.ndarray]:
    """Run programs (n, S) with sequential semantics. Per program: `n_lines`, `query`
    (letter index), `answer`, `depth`, `root_line`, `query_line` (its last assignment),
    `referent` (the letter index `query_line` copies, -1 where it assigns a digit);
    per line (n, L): `is_const`, `digit` (-1 for copies), `line_value` (the value its
    left-hand letter holds right after it, what the line resolves to), `source_line` (the
    line whose binding a copy reads, -1 for digits), `line_depth` and `line_root` (the hops
    of the line's own chain back to its digit, and that digit's line); per letter (n, 26):
    `value` and `letter_depth` (the hops of its final binding; -1 if never assigned). Lines
    past a program's end hold -1 / False. `ids` may be any integer dtype (splits are uint8)."""
    ids = np.asarray(ids)
    n = len(ids)
    rows = np.arange(n)
    L = (ids == NL).sum(1)
    Lmax = int(L.max()) if n else 0
    val = np.full((n, 26), -1, np.int8)
    dep = np.zeros((n, 26), np.int8)
    root = np.full((n, 26), -1, np.int8)
    line = np.full((n, 26), -1, np.int8)
    is_const = np.zeros((n, Lmax), bool)
    digit = np.full((n, Lmax), -1, np.int8)
    line_value = np.full((n, Lmax), -1, np.int64)
    source_line = np.full((n, Lmax), -1, np.int64)
    line_depth = np.full((n, Lmax), -1, np.int64)
    line_root = np.full((n, Lmax), -1, np.int64)
    for k in range(Lmax):
        on = k < L
        # token ids become numbers here: signed first, since uint8 arithmetic wraps
        # (PAD - LETTER0 = 255) and a uint8 array beside -1 in np.where raises on numpy >= 2.5;
        # a column at a time, not a 64-bit copy of a 500k-program split
        lhs = ids[:, 4 * k].astype(np.int64) - LETTER0
        rhs = ids[:, 4 * k + 2].astype(np.int64)
        c = (rhs >= DIGIT0) & (rhs < DIGIT0 + 10)
        r = np.clip(rhs - LETTER0, 0, 25)
        v = np.where(c, rhs - DIGIT0, val[rows, r])
        d = np.where(c, 1, dep[rows, r] + 1)
        rt = np.where(c, k, root[rows, r])
        line_value[:, k] = np.where(on, v, -1)
        line_depth[:, k] = np.where(on, d, -1)
        line_root[:, k] = np.where(on, rt, -1)
        source_line[:, k] = np.where(on & ~c, line[rows, r], -1)
        a, l = rows[on], lhs[on]
        val[a, l], dep[a, l], root[a, l], line[a, l] = v[on], d[on], rt[on], k
        is_const[:, k] = c & on
        digit[:, k] = np.where(c & on, rhs - DIGIT0, -1)
    q = ids[rows, 4 * L + 1].astype(np.int64) - LETTER0
    qline = line[rows, q].astype(np.int64)
    rhs = ids[rows, 4 * np.maximum(qline, 0) + 2].astype(np.int64)
    copies = (qline >= 0) & ~((rhs >= DIGIT0) & (rhs < DIGIT0 + 10))
    referent = np.where(copies, rhs - LETTER0, -1)
    return {"n_lines": L.astype(np.int64), "query": q, "answer": val[rows, q].astype(np.int64),
            "referent": referent,
            "depth": dep[rows, q].astype(np.int64), "root_line": root[rows, q].astype(np.int64),
            "query_line": qline, "is_const": is_const,
            "digit": digit.astype(np.int64), "value": val.astype(np.int64),
            "line_value": line_value, "source_line": source_line, "line_depth": line_depth,
            "line_root": line_root, "letter_depth": np.where(val >= 0, dep, -1).astype(np.int64)}


def heuristic_predictions(p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each shallow rule's predicted digit (n,) for interpreted programs `p`."""
    is_const, digit = p["is_const"], p["digit"]
    n, Lmax = is_const.shape
    rows, k = np.arange(n), np.arange(Lmax)[None, :]
    last = np.where(is_const, k, -1).max(1)
    near = np.where(is_const & (k <= p["query_line"][:, None]), k, -1).max(1)
    count = np.zeros((n, 10), np.int64)
    first_seen = np.full((n, 10), Lmax, np.int64)
    for j in range(Lmax - 1, -1, -1):
        m = is_const[:, j]
        count[rows[m], digit[m, j]] += 1
        first_seen[rows[m], digit[m, j]] = j
    # most frequent digit; ties go to the digit seen first
    most = np.argmax(count * (Lmax + 1) - first_seen, 1)
    return {"first_line_constant": digit[:, 0], "last_constant": digit[rows, last],
            "most_frequent_digit": most, "nearest_constant": digit[rows, near]}


def chain_lines(p: dict[str, np.ndarray], max_hops: int) -> np.ndarray:
    """(n, max_hops) int64: column h-1 holds chain line h, the line hop h reads, counted from
    the query: chain line 1 is `query_line`, chain line h + 1 the `source_line` of chain line
    h (the binding in force where that line reads its letter, so reassignment is respected);
    -1 past a program's depth. `p` = `interpret`'s output."""
    n = len(p["query_line"])
    rows = np.arange(n)
    out = np.full((n, max_hops), -1, np.int64)
    k = p["query_line"].copy()  # (n,)
    for h in range(max_hops):
        out[:, h] = k
        if not p["source_line"].shape[1]:
            break
        k = np.where(k >= 0, p["source_line"][rows, np.maximum(k, 0)], -1)
    return out


def on_chain(p: dict[str, np.ndarray]) -> np.ndarray:
    """(n, L) bool: the lines of each program's query chain, from the query's own assignment
    (`query_line`) back through `source_line` to the digit (`root_line`); `p` = `interpret`'s
    output. A chain has `depth` lines."""
    n, L = p["source_line"].shape
    lines = chain_lines(p, int(p["depth"].max()) if n else 0)  # (n, depth)
    out = np.zeros((n, L), bool)
    rows, cols = np.nonzero(lines >= 0)
    out[rows, lines[rows, cols]] = True
    return out
