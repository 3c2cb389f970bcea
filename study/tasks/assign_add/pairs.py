"""Counterfactual (base, source) pairs of assign-and-add (Exoo et al. 2026).

The causal model (`causal`): x = value of the left operand, y = value of the right one,
answer (x + y) mod p. Kinds (`x`, `y` are aliases of the first two):
- `lhs_value`: the source changes the left operand's value to x' (the number token, or the
  value assigned to the left operand variable) and the right operand's value to y' != y;
  cf label = (x' + y) mod p. Changing y too makes the cf label differ from both the base's
  and the source's own label, so a site that carries the whole sum (or y) cannot pass for x.
- `rhs_value`: the mirror image, cf = (x + y') mod p.
- `binding` (variable operands): the base holds the target operand variable v = t and a
  distractor w = t'; the source swaps the two values (v = t', w = t) and changes the other
  operand's value; cf = the sum with the target operand equal to t'. The multiset of values in
  context is unchanged, only the binding moves.
- `operand_var` (variable operands): the source names another assigned variable w (value t')
  as the target operand, with the same restricted/allowed status at that side, and changes the
  other operand's value; cf = the sum with the target operand equal to t'.
For 2-var bases the target side is drawn uniformly (stratum `operand`: 0 left, 1 right).
Every new value keeps the held-out status of the base's pair (for the source's pair and the
cf pair), so base and source come from the same pool. Base and source share their layout
token for token apart from those values or that variable token: pairs are aligned
(`base_pos = source_pos = -1`). Pair stratum `value_pos` is the position of the token that
carries the target operand's value in the source (13/14 for a number operand, else the value
token of its assignment), the natural single-position patching site; stratum `value` is the
target operand's value in the source (x' or y', t'), which DAS's shuffled control matches by.

Pairs are drawn, like the data, from a split's sampling distributions (`generate.Spec`) and
rejection-sampled until every change above is possible.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from study.core.errors import UsageError
from study.tasks.assign_add.generate import Draw, Spec, masked_choice
from study.tasks.base import IGNORE, Pairs


def counterfactuals(task, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
    """n pairs of `kind` (or its alias `x`, `y`) drawn from the distribution of `split` of
    an `AssignAddTask`, a pure function of (config, kind, n, split, seed)."""
    kind = {"x": "lhs_value", "y": "rhs_value"}.get(kind, kind)
    if n < 1:
        raise UsageError(f"n={n}: need at least one counterfactual pair")
    if kind not in task.counterfactual_kinds:
        raise UsageError(f"kind={kind!r} is not a counterfactual kind of {task.name}; "
                         f"choose from {', '.join(task.counterfactual_kinds)}, x, y")
    gen = task.generator
    specs = gen.specs(split)
    if kind in ("binding", "operand_var"):  # needs a variable operand: drop +n n
        specs = [(s, replace(sp, forms=(0.0, *sp.forms[1:]))) for s, sp in specs
                 if sum(sp.forms[1:]) > 0]
        if not specs:
            raise UsageError(f"kind={kind} needs variable operands; split {split} has none")
    rng = gen.rng("cf", kind, split, seed)
    counts = np.bincount(rng.integers(len(specs), size=n), minlength=len(specs))
    parts = [_pairs(gen, rng, kind, sp, int(m)) for (_, sp), m in zip(specs, counts) if m]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = rng.permutation(n)
    b, s = out.pop("base_ids")[order], out.pop("source_ids")[order]
    bl, cl = out.pop("base_labels")[order], out.pop("cf_labels")[order]
    none = np.full(n, -1, dtype=np.int64)
    return Pairs(kind, b, s, bl, cl, none, none.copy(), {k: v[order] for k, v in out.items()})


def _pairs(gen, rng, kind: str, spec: Spec, n: int) -> dict:
    """n aligned (base, source) pairs of one sampling distribution (rejection-sampled)."""
    got, have, tries = [], 0, 0
    while have < n:
        base, src, right, ok = _make_source(gen, rng, kind, gen.draw(rng, 2 * (n - have) + 16,
                                                                     spec))
        got.append(_pair_arrays(gen, base.take(ok), src.take(ok), right[ok]))
        have, tries = have + int(ok.sum()), tries + 1
        if tries >= 50 and have == 0:
            raise UsageError(f"kind={kind}: no valid pair can be built for this split "
                             "(too few variables of the needed status)")
    return {k: np.concatenate([g[k] for g in got])[:n] for k in got[0]}


def _new_value(gen, rng, old, fixed, right, status):
    """Uniform value != old whose pair with `fixed` (at the other side) has held-out
    status `status`; returns (value, found)."""
    v = np.arange(gen.config.p)
    held = np.where(right[:, None], gen.held[fixed[:, None], v[None]],
                    gen.held[v[None], fixed[:, None]])  # (n, p)
    cand = (held == status[:, None]) & (v[None] != old[:, None])
    return masked_choice(rng, cand), cand.any(axis=1)


def _make_source(gen, rng, kind: str, base: Draw):
    n, rows = len(base.form), np.arange(len(base.form))
    # target side: the variable one for 1-var, uniform for 2-var and 0-var
    right = np.where(base.form == 2, True, np.where(base.form == 1, False,
                                                    rng.random(n) < 0.5))
    if kind in ("lhs_value", "rhs_value"):
        right = np.full(n, kind == "rhs_value")
    t_old, o_old = base.value(right), base.value(~right)
    status = gen.held[base.value(np.zeros(n, bool)), base.value(np.ones(n, bool))]
    t_new, ok1 = _new_value(gen, rng, t_old, o_old, right, status)
    o_new, ok2 = _new_value(gen, rng, o_old, t_new, ~right, status)
    ok = ok1 & ok2
    base, src = base.copy(), base.copy()
    t_slot, _ = base.side(right)
    o_slot, _ = base.side(~right)
    active = base.avars >= 0
    distractor = active & (np.arange(active.shape[1]) != t_slot[:, None]) & \
        (np.arange(active.shape[1]) != o_slot[:, None])
    if kind in ("binding", "operand_var"):
        if kind == "operand_var":  # another variable of the same status at that side
            restr = np.where(right[:, None], gen.no_right, gen.no_left)  # (n, V)
            t_var = base.avars[rows, np.maximum(t_slot, 0)]
            o_var = np.where(o_slot >= 0, base.avars[rows, np.maximum(o_slot, 0)], -1)
            vs = np.arange(gen.config.n_vars)
            cand = (restr == restr[rows, t_var][:, None]) & (vs != t_var[:, None]) & \
                (vs != o_var[:, None])
            new_var = masked_choice(rng, cand)
            present = distractor & (base.avars == new_var[:, None])
            k = np.where(present.any(1), np.argmax(present, 1), masked_choice(rng, distractor))
            ok &= cand.any(1) & (present.any(1) | distractor.any(1))
            base.avars[rows, k] = np.where(ok, new_var, base.avars[rows, k])
        else:
            k = masked_choice(rng, distractor)
            ok &= distractor.any(1)
        ok &= t_slot >= 0
        base.avals[rows, k] = np.where(ok, t_new, base.avals[rows, k])
        src.avars, src.avals = base.avars.copy(), base.avals.copy()
        if kind == "binding":
            src.avals[rows, k] = np.where(ok, t_old, src.avals[rows, k])
            src.avals[rows, np.maximum(t_slot, 0)] = np.where(ok, t_new, t_old)
        else:
            src.lslot = np.where(ok & ~right, k, src.lslot)
            src.rslot = np.where(ok & right, k, src.rslot)
    else:
        _set_value(src, right, t_new)
    _set_value(src, ~right, o_new)
    return base, src, right, ok


def _set_value(d: Draw, right, value):
    slot, _ = d.side(right)
    rows = np.flatnonzero(slot >= 0)
    d.avals[rows, slot[rows]] = value[rows]
    d.lnum = np.where(~right & (d.lslot < 0), value, d.lnum)
    d.rnum = np.where(right & (d.rslot < 0), value, d.rnum)


def _pair_arrays(gen, base: Draw, src: Draw, right: np.ndarray) -> dict:
    b, s = gen.encode(base), gen.encode(src)
    n, p = len(right), gen.config.p
    t = src.value(right)
    o = base.value(~right)
    cf = np.full_like(b.labels, IGNORE)
    cf[:, -1] = (t + o) % p  # the base with the target operand's value from the source
    slot, _ = src.side(right)
    value_pos = np.where(slot >= 0, gen.starts(src)[np.arange(n), np.maximum(slot, 0)] + 1,
                         gen.config.seq_len - 3 + right)
    return {"base_ids": b.ids, "source_ids": s.ids, "base_labels": b.labels,
            "cf_labels": cf, **b.strata, "operand": right.astype(np.int64),
            "value_pos": value_pos.astype(np.int64), "value": t.astype(np.int64)}
