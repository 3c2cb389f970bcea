"""What probes and circuit scores need from each task, keyed by task name.

Two views of a batch of token arrays `ids` (n, pos):

- `probe_variables(task, ids)`: causal-model variables per example and position,
  name -> (n, pos) int64 with -1 where the variable is undefined (padding, or a position the
  variable does not live at). A task that offers `variable_values(ids)` (counting) is used
  as is; the others get an adapter here, built on the task's own interpreter:
  * binding [ours]: `root_value` = the queried variable's value (the answer) at every token;
    `line_value` = at the four tokens of line k, the value the line's left-hand variable
    holds after line k runs, and the answer at the query tokens `#q:` (the program state a
    position could carry, [paper]: "linear probes recover only ≈31 % of variable values").
  * assign_add [ours]: `x`, `y` = the operand values (the task's causal variables) and
    `sum` = (x + y) mod p at every token; `var_of_num` = at each assignment's value token,
    the index of the variable it is assigned to ([paper] `probe_l1_var_from_num`).
  * any other task: `output` = the scored label at each scored position.
- `attention_targets(task, ids)`: for "where does this head look" scores,
  name -> (query (n, pos) bool, keys (n, pos) bool, or (n, pos, pos) bool when each query
  row has its own keys); a score is the attention mass from the query positions onto the key
  positions (see `scores.target_sums`).
  * binding: from the `:` position (where the answer is read out) to `chain` (every token of
    the lines on the query's chain), `root` (the chain's digit) and `query_line` (the line
    that assigns the queried letter, the first hop).
  * assign_add: from `=` to `operands` (the tokens after `+`) and to `values` (the token
    that carries each operand's value: the number itself, or the value assigned to the
    variable); `prev_var` from each assignment's value token to its variable token.
  * counting: from every scored position (T through the last response) to `trigger`, to
    `demos` (the demonstration tokens) and to `bos`.

Also `sample` (a seeded subset of a split, ids/labels as int64), `correct` (the engine's
"every scored position right" rule) and `stratum_label` ("depth=3", "pool=var0_seen").
"""
from __future__ import annotations

import numpy as np

IGNORE = -1


# --- probe variables -------------------------------------------------------------------

def probe_variables(task, ids: np.ndarray,
                    labels: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """name -> (n, pos) int64 values, -1 where undefined."""
    if hasattr(task, "variable_values"):
        return {k: np.asarray(v, dtype=np.int64) for k, v in task.variable_values(ids).items()}
    adapter = _PROBE_ADAPTERS.get(task.name)
    if adapter is not None:
        return adapter(task, ids)
    if labels is None:
        raise ValueError(f"task {task.name!r} has no probe variables; pass labels to probe "
                         f"its outputs")
    return {"output": np.where(labels == IGNORE, -1, labels).astype(np.int64)}


def _binding_variables(task, ids: np.ndarray) -> dict[str, np.ndarray]:
    from tasks.binding import interpret

    p = interpret(ids)
    n, pos = ids.shape
    answer = p["answer"]
    line_value = np.full((n, pos), -1, np.int64)
    for i in range(n):
        L = int(p["n_lines"][i])
        vals = _binding_line_values(ids[i], L)
        line_value[i, :4 * L] = np.repeat(vals, 4)
        line_value[i, 4 * L:4 * L + 3] = answer[i]
    live = ids != task.pad_id
    root = np.where(live, answer[:, None], -1)
    return {"root_value": root.astype(np.int64), "line_value": line_value}


def _binding_line_values(row: np.ndarray, n_lines: int) -> np.ndarray:
    """Value of each line's left-hand variable right after that line (sequential semantics)."""
    from tasks.binding import DIGIT0, LETTER0

    value = {}
    out = np.empty(n_lines, np.int64)
    for k in range(n_lines):
        lhs, rhs = int(row[4 * k]) - LETTER0, int(row[4 * k + 2])
        v = rhs - DIGIT0 if DIGIT0 <= rhs < DIGIT0 + 10 else value[rhs - LETTER0]
        value[lhs] = v
        out[k] = v
    return out


def _assign_add_variables(task, ids: np.ndarray) -> dict[str, np.ndarray]:
    n, pos = ids.shape
    x, y = task.operands(ids)
    live = ids != task.pad_id
    const = lambda v: np.where(live, v[:, None], -1).astype(np.int64)  # noqa: E731
    var_of_num = np.full((n, pos), -1, np.int64)
    prefix = pos - 4  # the core `+ lhs rhs =` closes every sequence
    is_var = ids[:, :prefix - 1] >= task.var0
    is_num = ids[:, 1:prefix] < task.config.p
    m = is_var & is_num  # (n, prefix - 1): a variable followed by its value
    rows, cols = np.nonzero(m)
    var_of_num[rows, cols + 1] = ids[rows, cols] - task.var0
    return {"x": const(x), "y": const(y), "sum": const((x + y) % task.config.p),
            "var_of_num": var_of_num}


_PROBE_ADAPTERS = {"binding": _binding_variables, "assign_add": _assign_add_variables}


# --- attention targets -------------------------------------------------------------------

def attention_targets(task, ids: np.ndarray,
                      labels: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (query mask (n, pos), key mask (n, pos) or (n, pos, pos)), bool. Empty for
    tasks without a view."""
    fn = _TARGET_ADAPTERS.get(task.name)
    return fn(task, ids) if fn is not None else {}


def _binding_targets(task, ids: np.ndarray):
    from tasks.binding import interpret

    p = interpret(ids)
    n, pos = ids.shape
    rows = np.arange(n)
    query = np.zeros((n, pos), bool)
    query[rows, 4 * p["n_lines"] + 2] = True  # the `:` token
    chain = np.zeros((n, pos), bool)
    root = np.zeros((n, pos), bool)
    first = np.zeros((n, pos), bool)
    for i in range(n):
        lines = binding_chain_lines(ids[i], int(p["n_lines"][i]))
        for k in lines:
            chain[i, 4 * k:4 * k + 4] = True
        root[i, 4 * lines[-1] + 2] = True
        first[i, 4 * lines[0]:4 * lines[0] + 4] = True
    return {"chain": (query, chain), "root": (query, root), "query_line": (query, first)}


def binding_chain_lines(row: np.ndarray, n_lines: int) -> list[int]:
    """Lines of the query's chain, from the query's own assignment back to the digit."""
    from tasks.binding import DIGIT0, LETTER0

    q = int(row[4 * n_lines + 1]) - LETTER0
    last = {}  # letter -> its latest assignment line before the current one
    defs = []
    for k in range(n_lines):
        defs.append(dict(last))
        last[int(row[4 * k]) - LETTER0] = k
    lines, k = [], last[q]
    while True:
        lines.append(k)
        rhs = int(row[4 * k + 2])
        if DIGIT0 <= rhs < DIGIT0 + 10:
            return lines
        k = defs[k][rhs - LETTER0]


def _assign_add_targets(task, ids: np.ndarray):
    n, pos = ids.shape
    p = task.config.p
    eq = np.zeros((n, pos), bool)
    eq[:, pos - 1] = True
    operands = np.zeros((n, pos), bool)
    operands[:, pos - 3:pos - 1] = True
    values = assign_add_value_positions(task, ids)
    prefix = pos - 4
    num_query = np.zeros((n, pos), bool)
    num_query[:, 1:prefix] = (ids[:, 1:prefix] < p) & (ids[:, :prefix - 1] >= task.var0)
    prev = np.zeros((n, pos, pos), bool)  # per query row: the token just before it
    rows, cols = np.nonzero(num_query)
    prev[rows, cols, cols - 1] = True
    return {"operands": (eq, operands), "values": (eq, values),
            "prev_var": (num_query, prev)}


def assign_add_value_positions(task, ids: np.ndarray) -> np.ndarray:
    """(n, pos) bool: the tokens carrying the operand values (a number operand itself, or the
    value token assigned to a variable operand) [paper: attn_l2_equal_to_values targets]."""
    n, pos = ids.shape
    out = np.zeros((n, pos), bool)
    for j in (pos - 3, pos - 2):
        tok = ids[:, j]
        is_var = tok >= task.var0
        out[~is_var, j] = True
        # the value token follows the (only) assignment of that variable in the prefix
        hit = (ids[:, :pos - 5] == tok[:, None]) & is_var[:, None]  # (n, prefix - 1)
        rows, cols = np.nonzero(hit)
        out[rows, cols + 1] = True
    return out


def _counting_targets(task, ids: np.ndarray):
    a = task.alphabet
    tid = {t: i for i, t in enumerate(task.vocab)}
    n, pos = ids.shape
    trig = ids == tid[a.trig]
    t_pos = np.argmax(trig, axis=1)  # (n,)
    idx = np.arange(pos)[None, :]
    n_demo = t_pos - 1
    query = (idx >= t_pos[:, None]) & (idx <= t_pos[:, None] + n_demo[:, None])
    demos = (idx >= 1) & (idx < t_pos[:, None])
    bos = np.zeros((n, pos), bool)
    bos[:, 0] = True
    return {"trigger": (query, trig), "demos": (query, demos), "bos": (query, bos)}


_TARGET_ADAPTERS = {"binding": _binding_targets, "assign_add": _assign_add_targets,
                    "counting": _counting_targets}


# --- scoring -------------------------------------------------------------------------------

def correct(logits, labels: np.ndarray) -> np.ndarray:
    """(n,) bool: every scored position's argmax over the whole vocabulary equals its label
    (tasks/base.py's rule, as the training engine scores it). `logits` (n, pos, vocab)."""
    pred = np.argmax(np.asarray(logits), axis=-1)
    scored = labels != IGNORE
    return np.all((pred == labels) | ~scored, axis=1)


# --- data ----------------------------------------------------------------------------------

def sample(task, split: str, n: int, seed: int = 0):
    """Up to n sequences of a split drawn uniformly without replacement (kept in split order):
    (ids (n, pos) int64, labels (n, pos) int64, strata). Tasks may store narrow dtypes
    (binding keeps uint8 ids); analyses always see int64."""
    ex = task.split(split)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(ex), size=min(n, len(ex)), replace=False))
    strata = {k: np.asarray(v)[pick] for k, v in ex.strata.items()}
    return (np.asarray(ex.ids)[pick].astype(np.int64),
            np.asarray(ex.labels)[pick].astype(np.int64), strata)


def stratum_label(task, name: str, value) -> str:
    """`name=value` for the ablation table; assign_add's `pool` index becomes its pool name."""
    if task.name == "assign_add" and name == "pool":
        from tasks.assign_add import NINE_POOLS
        return f"pool={list(NINE_POOLS)[int(value)]}"
    value = value.item() if hasattr(value, "item") else value
    return f"{name}={value}"
