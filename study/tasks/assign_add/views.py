"""What analyses read of assign-and-add sequences (Exoo et al. 2026): probe variables,
attention targets, the facts behind the authors' progress measures, and the accuracy of
shortcut rules.

Token layout (`vocab`): positions 0..P-1 (P = seq_len - 4) hold the assignments
`[var, value]` and PADs; the core `+ lhs rhs =` closes every sequence, so `+` is at P, the
operands at P+1 and P+2 and `=` (where the answer is read out) at P+3. Number tokens are
ids 0..p-1, variable tokens ids var0..var0+n_vars-1.
"""
from __future__ import annotations

import numpy as np

from study.tasks.assign_add.generate import NINE_POOLS
from study.tasks.base import ProgressMeasures


def assigned_numbers(task, ids: np.ndarray) -> np.ndarray:
    """(n, pos) bool: the value token of each assignment (a number right after a variable,
    inside the assignment prefix)."""
    n, pos = ids.shape
    prefix = pos - 4
    out = np.zeros((n, pos), bool)
    out[:, 1:prefix] = (ids[:, 1:prefix] < task.config.p) & (ids[:, :prefix - 1] >= task.var0)
    return out


def probe_variables(task, ids: np.ndarray) -> dict[str, np.ndarray]:
    """name -> (n, pos) int64, -1 where undefined:
    - `x`, `y`: the operand values (the causal model's variables), at every non-PAD token
      [ours: constant over the sequence, so a probe at a position shows when it is known];
    - `sum`: (x + y) mod p, likewise;
    - `var_of_num`: at each assignment's value token, the index of the variable it is
      assigned to (Exoo et al.'s `probe_l1_var_from_num`)."""
    ids = np.asarray(ids, dtype=np.int64)  # ids become numbers (minus var0): signed first
    x, y = task.operands(ids)
    live = ids != task.pad_id
    const = lambda v: np.where(live, v[:, None], -1).astype(np.int64)  # noqa: E731
    var_of_num = np.full(ids.shape, -1, np.int64)
    rows, cols = np.nonzero(assigned_numbers(task, ids))
    var_of_num[rows, cols] = ids[rows, cols - 1] - task.var0
    return {"x": const(x), "y": const(y), "sum": const((x + y) % task.config.p),
            "var_of_num": var_of_num}


def value_positions(task, ids: np.ndarray) -> np.ndarray:
    """(n, pos) bool: the tokens carrying the operand values, a number operand itself or the
    value token assigned to a variable operand (Exoo et al.'s `attn_l2_equal_to_values`
    targets)."""
    n, pos = ids.shape
    out = np.zeros((n, pos), bool)
    for j in (pos - 3, pos - 2):  # the two operand tokens
        tok = ids[:, j]
        is_var = tok >= task.var0
        out[~is_var, j] = True
        # the value token follows the (only) assignment of that variable in the prefix
        hit = (ids[:, :pos - 5] == tok[:, None]) & is_var[:, None]  # (n, prefix - 1)
        rows, cols = np.nonzero(hit)
        out[rows, cols + 1] = True
    return out


def attention_targets(task, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Exoo et al.'s attention progress-measure targets, masks bool:
    - `operands`: from `=` (n, pos) to the two operand tokens after `+` (n, pos);
    - `values`: from `=` to the tokens carrying the operand values (`value_positions`);
    - `prev_var`: from each assignment's value token to the variable token just before it,
      keys per query row (n, pos, pos)."""
    n, pos = ids.shape
    eq = np.zeros((n, pos), bool)
    eq[:, pos - 1] = True
    operands = np.zeros((n, pos), bool)
    operands[:, pos - 3:pos - 1] = True
    num_query = assigned_numbers(task, ids)
    prev = np.zeros((n, pos, pos), bool)  # per query row: the token just before it
    rows, cols = np.nonzero(num_query)
    prev[rows, cols, cols - 1] = True
    return {"operands": (eq, operands), "values": (eq, value_positions(task, ids)),
            "prev_var": (num_query, prev)}


def progress_measures(task) -> ProgressMeasures:
    """Exoo et al.'s progress measures [paper `progress_measures.py`]: the top-1 / top-2
    attention criteria `attn_num_to_prev`, `attn_eq_to_operands`, `attn_eq_to_values`; the
    variable-name probe `probe_var_from_num`; the weight views over the assignment prefix,
    the variable tokens and the residues mod p."""
    c = task.config
    return ProgressMeasures(
        topk_targets={"prev_var": "attn_num_to_prev", "operands": "attn_eq_to_operands",
                      "values": "attn_eq_to_values"},
        probes={"probe_var_from_num": "var_of_num"},
        prefix_len=c.seq_len - 4,
        variable_ids=tuple(range(task.var0, task.var0 + c.n_vars)),
        modulus=c.p, number_ids=tuple(range(c.p)))


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
