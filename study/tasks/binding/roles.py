"""Token roles of binding programs (Wu, Geiger, Millière 2025): along the query chain, for
role-aligned patching (`pair_roles`); by place in the program: `layout`.

Wu et al. trace the answer by patching the residual stream at the right-hand-side tokens of
the query's chain: the value moves along them hop by hop across layers. The chain's lines
sit at different positions in each program, so a table over absolute positions mixes them;
these roles name each pair's own positions instead [ours: the names]. Counted along the
chain, in the base program (`causal.interpret`, reassignment included: a copy reads the
binding its right-hand letter holds at that line, `source_line`). Chain lines are counted from
the query, as the hop-role attention targets count them (`causal.chain_lines`: chain line 1
assigns the queried letter, chain line h + 1 is the line chain line h reads), and listed in
the order the value travels:

- `root`: the right-hand digit of the chain's last line (`root_line`), where the value enters;
- `hop<D-1>` .. `hop1`: the right-hand letter of chain line h, a line that copies the value
  one line closer to the query; `hop1` is the query's own assignment (`query_line`); a chain
  of depth d has `hop1` .. `hop<d-1>` (the digit line is `root`), -1 for the others;
- `query_letter`: the `q` of `#q:`;
- `answer`: the `:`, where the answer is read out.

D is the task's `max_depth`, or the deepest chain among the programs if deeper (the
`gen_hops` split), so the names are the same for every checkpoint and seed of a config.
"""
from __future__ import annotations

import numpy as np

from study.tasks.binding.causal import chain_lines, interpret


def pair_roles(base_ids: np.ndarray, max_depth: int) -> dict[str, np.ndarray]:
    """Role name -> (n,) int64 position in each base program (n, S), -1 where absent."""
    p = interpret(base_ids)
    depth = max(max_depth, int(p["depth"].max()) if len(p["depth"]) else 0)
    lines = chain_lines(p, depth)  # (n, depth): chain line h in column h - 1, from the query
    rhs = np.where(lines >= 0, 4 * lines + 2, -1)  # the right-hand token of each chain line
    out = {"root": 4 * p["root_line"] + 2}
    for h in range(depth - 1, 0, -1):  # a copying line: chain line h of a chain deeper than h
        out[f"hop{h}"] = np.where(p["depth"] > h, rhs[:, h - 1], -1)
    out["query_letter"] = 4 * p["n_lines"] + 1
    out["answer"] = 4 * p["n_lines"] + 2
    return {k: np.asarray(v, np.int64) for k, v in out.items()}
