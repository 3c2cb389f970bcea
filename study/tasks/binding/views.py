"""What analyses read of binding programs (Wu et al. 2025), from binding's own interpreter
(`causal.interpret`): probe variables, attention targets and the shortcut rules' accuracy.

Token layout (`vocab`): line k of a program occupies positions 4k..4k+3 (`x`, `=`, rhs,
newline) and the query `#q:` the three positions after the last line; the answer is read out
at `:`.
"""
from __future__ import annotations

import numpy as np

from study.tasks.binding.causal import heuristic_predictions, interpret, on_chain


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


def attention_targets(ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """From the `:` position (where the answer is read out) [ours: the targets follow the
    chain-following account of Wu et al. 2025] to
    - `chain`: every token of the lines on the query's chain,
    - `root`: the chain's digit,
    - `query_line`: the line that assigns the queried letter (the first hop).
    Masks (n, pos) bool."""
    p = interpret(ids)
    n, width = ids.shape
    rows = np.arange(n)
    line, in_lines = _line_of(p, width)
    chain_lines = on_chain(p)  # (n, L)
    L = max(chain_lines.shape[1], 1)
    query = np.zeros((n, width), bool)
    query[rows, 4 * p["n_lines"] + 2] = True  # the `:` token
    chain = in_lines & (chain_lines[:, np.minimum(line, L - 1)] if chain_lines.shape[1]
                        else np.zeros((n, width), bool))
    root = np.zeros((n, width), bool)
    root[rows, 4 * p["root_line"] + 2] = True
    first = in_lines & (line[None, :] == p["query_line"][:, None])
    return {"chain": (query, chain), "root": (query, root), "query_line": (query, first)}


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
