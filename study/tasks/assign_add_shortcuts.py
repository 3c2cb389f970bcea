"""Shortcut rules of assign-and-add, scored on a split per stratum (and per pool on `test`);
`AssignAddTask.heuristics` calls `heuristics` here."""
from __future__ import annotations

import numpy as np

from study.tasks.assign_add import NINE_POOLS


def heuristics(task, split: str = "test") -> list[dict]:
    """Shortcut rules, scored per stratum (and per pool on `test`):
    - ignore_variables: a variable operand counts as 0;
    - last_assigned_value: a variable operand takes the most recently assigned value
      (recency instead of binding);
    - left_operand_only: answer = the resolved left operand (drops the addition);
    - seen_pair_lookup: operands resolved, sums known only for pairs seen in training,
      else 0 (a memoriser of the training pairs);
    - seen_pair_lookup_commutative: the same, also knowing (y, x) when (x, y) is seen."""
    ex = task.split(split)
    ids, p = np.asarray(ex.ids, dtype=np.int64), task.config.p  # number tokens are summed
    label = ex.labels[:, -1]
    x, y = task.operands(ids)
    lhs, rhs = ids[:, -3], ids[:, -2]
    nums = ids[:, :-4] < p
    last_val = ids[np.arange(len(ids)), ids.shape[1] - 5 - np.argmax(nums[:, ::-1], 1)]
    as_zero = [np.where(t >= task.var0, 0, t) for t in (lhs, rhs)]
    recent = [np.where(t >= task.var0, last_val, t) for t in (lhs, rhs)]
    seen = ~task.held[x, y]
    preds = {
        "ignore_variables": (as_zero[0] + as_zero[1]) % p,
        "last_assigned_value": (recent[0] + recent[1]) % p,
        "left_operand_only": x,
        "seen_pair_lookup": np.where(seen, (x + y) % p, 0),
        "seen_pair_lookup_commutative": np.where(seen | ~task.held[y, x], (x + y) % p, 0),
    }
    rows = []
    names = list(NINE_POOLS)
    for rule, pred in preds.items():
        correct = pred == label
        rows.append(_row(rule, "all", "all", correct))
        for stratum, values in ex.strata.items():
            for v in np.unique(values):
                shown = names[int(v)] if stratum == "pool" else v.item()
                rows.append(_row(rule, stratum, shown, correct[values == v]))
    return rows


def _row(rule, stratum, value, correct) -> dict:
    return {"heuristic": rule, "stratum": stratum, "value": value,
            "accuracy": float(correct.mean()), "n": int(correct.size)}
