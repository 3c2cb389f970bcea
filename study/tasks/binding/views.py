"""What analyses read of binding programs (Wu et al. 2025), from binding's own interpreter
(`causal.interpret`): probe variables, attention targets and the shortcut rules' accuracy.

Token layout (`vocab`): line k of a program occupies positions 4k..4k+3 (`x`, `=`, rhs,
newline) and the query `#q:` the three positions after the last line; the answer is read out
at `:`.
"""
from __future__ import annotations

import numpy as np

from study.tasks.binding.causal import chain_lines, heuristic_predictions, interpret, on_chain


def _line_of(p: dict[str, np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(line index of each position (pos,), in-a-line mask (n, pos))."""
    idx = np.arange(width)
    return idx // 4, idx[None, :] < 4 * p["n_lines"][:, None]


def probe_variables(ids: np.ndarray, pad_id: int) -> dict[str, np.ndarray]:
    """name -> (n, pos) int64, -1 where undefined [ours: the choice of variables]:
    - `root_value`: the queried variable's value (the answer) at every non-PAD token;
    - `line_value`: at the four tokens of line k, the value line k's left-hand variable holds
      right after it; at the query tokens `#q:`, the answer. The program state a position
      could carry (Wu et al. 2025: linear probes recover only ~31 % of variable values)."""
    p = interpret(ids)
    n, width = ids.shape
    answer = p["answer"][:, None]  # (n, 1)
    line, in_lines = _line_of(p, width)
    lv = p["line_value"]  # (n, L)
    by_line = lv[:, np.minimum(line, lv.shape[1] - 1)] if lv.shape[1] else np.full((n, width), -1)
    start = 4 * p["n_lines"][:, None]
    idx = np.arange(width)[None, :]
    query = (idx >= start) & (idx < start + 3)
    line_value = np.where(in_lines, by_line, np.where(query, answer, -1))
    root = np.where(ids != pad_id, answer, -1)
    return {"root_value": root.astype(np.int64), "line_value": line_value.astype(np.int64)}


def attention_targets(ids: np.ndarray,
                      max_hops: int = 4) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Where a head that follows the query chain should look [ours: the targets follow the
    chain-following account of Wu et al. 2025]. Query masks (n, pos) bool; keys (n, pos)
    bool, the same for every query row of a program.

    From the `:` position (where the answer is read out) to
    - `chain`: every token of the lines on the query's chain,
    - `root`: the chain's digit,
    - `query_line`: the line that assigns the queried letter (the first hop).

    Hop roles (Wu et al. 2025: early heads do the first hop, middle heads the later hops,
    last-layer heads move the value to the output) [ours: the definitions]. Hop h goes from a
    position that reads a letter to the line that defines it (all 4 tokens), counted from the
    query: chain line 1 is the query's own assignment (`query_line`), chain line h + 1 the
    line whose binding chain line h copies (`causal.interpret`'s `source_line`, the binding in
    force, so a reassigned letter points at its latest assignment before the reader).
    - `hop1`: from the query letter and `:` (the query `#q:` reads q) to chain line 1;
    - `hop<h>`, h >= 2: from the right-hand side and newline of chain line h - 1 (the line
      that copies the letter) to chain line h: the hop resolved where the letter is read;
    - `hop<h>_at_query`, h >= 2: from `:` to chain line h: the same hop resolved lazily at
      the read-out position.
    h runs 1..max_hops (the task passes its `max_depth`), or to the deepest chain among the
    programs if deeper (`gen_hops`), so the names are the same for every checkpoint and seed
    of a config; a program shallower than h has no query rows for hop h (its mean is over
    the programs that have the hop). A hop read at the line and one read at `:` are
    two targets, not one: they are different mechanisms (eager and lazy dereferencing), and
    one mean over both kinds of row would weigh them 2:1 and hide which a head does."""
    p = interpret(ids)
    n, width = ids.shape
    rows = np.arange(n)
    line, in_lines = _line_of(p, width)
    on_lines = on_chain(p)  # (n, L)
    L = max(on_lines.shape[1], 1)
    colon = 4 * p["n_lines"] + 2  # (n,) the `:` token
    query = np.zeros((n, width), bool)
    query[rows, colon] = True
    chain = in_lines & (on_lines[:, np.minimum(line, L - 1)] if on_lines.shape[1]
                        else np.zeros((n, width), bool))
    root = np.zeros((n, width), bool)
    root[rows, 4 * p["root_line"] + 2] = True
    first = in_lines & (line[None, :] == p["query_line"][:, None])
    out = {"chain": (query, chain), "root": (query, root), "query_line": (query, first)}

    max_hops = max(max_hops, int(p["depth"].max(initial=0)))
    hops = chain_lines(p, max_hops)  # (n, max_hops)
    for h in range(1, max_hops + 1):
        target = hops[:, h - 1]  # (n,) chain line h, -1 where the program is shallower
        live = target >= 0
        keys = in_lines & (line[None, :] == target[:, None])  # (n, pos)
        # the two positions that read: the query's letter and `:`, or a line's rhs and newline
        reader = colon - 1 if h == 1 else 4 * hops[:, h - 2] + 2  # (n,)
        at_line = np.zeros((n, width), bool)
        at_line[rows[live], reader[live]] = True
        at_line[rows[live], reader[live] + 1] = True
        out[f"hop{h}"] = (at_line, keys)
        if h >= 2:
            at_query = np.zeros((n, width), bool)
            at_query[rows[live], colon[live]] = True
            out[f"hop{h}_at_query"] = (at_query, keys)
    return out


def heuristics(task, split: str = "test") -> list[dict]:
    """Shallow rules, overall, per depth (and per n_lines in gen_lines): the digit on
    line 0; the last digit assigned; the most frequent digit (ties: seen first); the
    digit nearest at or before the query's own assignment line."""
    ex = task.split(split)
    p = interpret(ex.ids)
    out = []
    for name, pred in heuristic_predictions(p).items():
        right = pred == p["answer"]
        out.append({"heuristic": name, "stratum": "all", "value": "all",
                    "accuracy": float(right.mean()), "n": len(right)})
        for stratum in ("depth", "n_lines"):
            if stratum not in ex.strata:
                continue
            for v in np.unique(ex.strata[stratum]):
                m = ex.strata[stratum] == v
                out.append({"heuristic": name, "stratum": stratum, "value": int(v),
                            "accuracy": float(right[m].mean()), "n": int(m.sum())})
    return out
