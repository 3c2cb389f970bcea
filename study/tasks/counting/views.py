"""What analyses read of counting sequences (Grant, Goodman, McClelland 2025): probe
variables (every causal variable of the three programs after each token,
`causal.variable_values`), attention targets from the response positions to the trigger, the
demonstrations and `B` [ours], and the accuracy of shortcut rules.
"""
from __future__ import annotations

import numpy as np

from study.tasks.counting.causal import variable_values
from study.tasks.counting.vocab import ID, Alphabet


def probe_variables(ids: np.ndarray, alphabet: Alphabet) -> dict[str, np.ndarray]:
    """Every causal variable of the three programs (Grant et al. 2025), after each token:
    `up_down:count` etc. -> (n, pos) int64, -1 at padding."""
    return variable_values(np.asarray(ids), alphabet, ID["PAD"])


def attention_targets(ids: np.ndarray,
                      alphabet: Alphabet) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """From every scored position (T through the last response) to `trigger` (the T
    token), `demos` (the demonstration tokens) and `bos` (B) [ours]; masks (n, pos)."""
    ids = np.asarray(ids)
    n, width = ids.shape
    trig = ids == ID[alphabet.trig]  # (n, pos)
    t_pos = np.argmax(trig, axis=1)[:, None]  # (n, 1)
    idx = np.arange(width)[None, :]
    demos = np.isin(ids, [ID[t] for t in alphabet.demo]) & (idx < t_pos)  # voids are not
    query = (idx >= t_pos) & (idx <= t_pos + demos.sum(1, keepdims=True))
    bos = np.broadcast_to(idx == 0, (n, width)).copy()
    return {"trigger": (query, trig), "demos": (query, demos), "bos": (query, bos)}


def heuristics(task, split: str = "test") -> list[dict]:
    """Shortcut rules, each naming a number of responses; right iff it equals the count.

    - `modal_count`: always the most frequent training count (ties: the smallest);
    - `subitize_3`: counts exactly up to 3 and answers 3 beyond (a small-number counter);
    - `distinct_demo_types`: the number of distinct demo tokens (1 for one-object variants).
    """
    ex = task.split(split)
    counts = ex.strata["count"]
    train_counts = task.split("train").strata["count"]
    values, freq = np.unique(train_counts, return_counts=True)
    modal = int(values[np.argmax(freq)])
    pos = np.arange(ex.ids.shape[1])[None, :]
    demo = np.isin(ex.ids, [ID[t] for t in task.alphabet.demo]) & (
        pos < task.generator.trigger_pos(ex.ids)[:, None])
    distinct = np.array([len(set(r[d].tolist())) for r, d in zip(ex.ids, demo)])
    guesses = {"modal_count": np.full(len(counts), modal),
               "subitize_3": np.minimum(counts, 3),
               "distinct_demo_types": distinct}
    rows = []
    for name, guess in guesses.items():
        right = guess == counts
        rows.append({"heuristic": name, "stratum": "all", "value": "all",
                     "accuracy": float(right.mean()), "n": int(len(right))})
        for c in np.unique(counts):
            sel = counts == c
            rows.append({"heuristic": name, "stratum": "count", "value": int(c),
                         "accuracy": float(right[sel].mean()), "n": int(sel.sum())})
    return rows
