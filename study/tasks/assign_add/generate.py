"""The generator of assign-and-add sequences and their splits (Exoo et al. 2026).

A sequence [paper, `bexoo/assign-and-add/train.py` `build_sequence`]: n assignments
`[var, value]` (no `=`), shuffled, with the 12 - 2n remaining PADs dropped one by one into
uniformly chosen gaps among the n + 1 gaps, then the core `+ lhs rhs =`; the label
(x + y) mod p is predicted at the last position (`labels` IGNORE elsewhere). Operand
variables are assigned exactly once; the other assignments (distractors) use further distinct
variables with uniform values [paper]. n is uniform on 1-6; a 2-var training sequence clamps
n up to 2 (so n = 2 has weight 2/6) [paper: `build_sequence`], the 2-var evaluation pools
draw n uniform on 2-6 [paper: `eval_pools._build_prefix_and_core_2var`]. A 0-var sequence
still holds at least one assignment, on a uniform variable [paper].

Held out of training [paper]: `held`, a fraction of the p^2 operand pairs (x, y) in every
form, chosen as the authors do (`random.Random(seed).sample` of the row-major pair list), and
restricted positions (`no_right`, `no_left`). A sampling distribution (`Spec`) names the form
weights, the pair side and the variable-position rule; `NINE_POOLS` are the authors'
evaluation pools, `EXTRA_POOLS` ours. Every split and training batch is a pure function of
(config, its name or step): `Generator.rng` names each random stream.
"""
from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

import numpy as np

from study.core.errors import UsageError
from study.tasks.assign_add.vocab import LEFT_VAR, RIGHT_VAR, Layout
from study.tasks.base import IGNORE, Examples


def n_seen_pairs(p: int, heldout_frac: float) -> int:
    """Pairs kept for training: floor((1 - frac) p^2) [paper: NUMS_TRAIN_PAIRS]."""
    return math.floor((1 - heldout_frac) * p * p + 1e-9)


@dataclass(frozen=True)
class Spec:
    """A sampling distribution: form weights, pair side, variable-position rule, 2-var n rule.
    rule: allowed | restricted (1-var: the variable; 2-var: at least one) | restricted1 |
    restricted2 (2-var: exactly one / both operand variables in restricted positions)."""

    forms: tuple[float, float, float, float]
    held_out: bool = False
    rule: str = "allowed"
    clamp2: bool = False  # 2-var n: max(2, n) as in training, else uniform on 2..max


_V1, _V2 = (0, 1, 1, 0), (0, 0, 0, 1)
NINE_POOLS: dict[str, Spec] = {  # [paper] eval_pools.SPECIAL_POOL_KINDS, in its order
    "var0_seen": Spec((1, 0, 0, 0)),
    "var0_heldout": Spec((1, 0, 0, 0), held_out=True),
    "var1_seen_allowed": Spec(_V1),
    "var1_seen_restricted": Spec(_V1, rule="restricted"),
    "var1_heldout_allowed": Spec(_V1, held_out=True),
    "var2_seen_allowed": Spec(_V2),
    "var2_seen_restricted1": Spec(_V2, rule="restricted1"),
    "var2_seen_restricted2": Spec(_V2, rule="restricted2"),
    "var2_heldout_allowed": Spec(_V2, held_out=True),
}
EXTRA_POOLS: dict[str, Spec] = {  # [ours] held-out pair x restricted position
    "var1_heldout_restricted": Spec(_V1, held_out=True, rule="restricted"),
    "var2_heldout_restricted": Spec(_V2, held_out=True, rule="restricted"),
}


@dataclass
class Draw:
    """The generative state of n sequences; ids are a function of it (`Generator.encode`).
    Assignment slots are in sequence order; -1 marks inactive slots / number operands."""

    form: np.ndarray  # (n,)
    n_assign: np.ndarray  # (n,)
    avars: np.ndarray  # (n, A) variable index per slot
    avals: np.ndarray  # (n, A) assigned value per slot
    gaps: np.ndarray  # (n, A + 1) PADs before slot k (last: before `+`)
    lslot: np.ndarray  # (n,) slot of the left operand variable, -1 for a number
    rslot: np.ndarray  # (n,)
    lnum: np.ndarray  # (n,) the left operand number, -1 for a variable
    rnum: np.ndarray  # (n,)

    def copy(self) -> "Draw":
        return Draw(**{k: v.copy() for k, v in vars(self).items()})

    def take(self, idx) -> "Draw":
        return Draw(**{k: v[idx] for k, v in vars(self).items()})

    def side(self, right: np.ndarray):
        """(slot, num) arrays of the left or right operand per row."""
        return np.where(right, self.rslot, self.lslot), np.where(right, self.rnum, self.lnum)

    def value(self, right: np.ndarray) -> np.ndarray:
        slot, num = self.side(right)
        rows = np.arange(len(slot))
        return np.where(slot >= 0, self.avals[rows, np.maximum(slot, 0)], num)


def _stream(*parts) -> list[int]:
    """Entropy for a numpy generator: non-negative ints as they are, anything else hashed."""
    return [p if isinstance(p, int) and p >= 0 else zlib.crc32(str(p).encode()) for p in parts]


def masked_choice(rng, mask: np.ndarray) -> np.ndarray:
    """Uniform index of a True entry per row of a (n, k) mask (0 where a row has none)."""
    return np.argmax(np.where(mask, rng.random(mask.shape), -1.0), axis=1)


class Generator:
    """The splits and training batches of one assign-and-add config (an `AssignAddConfig`):
    the held-out pairs `held` (p, p) bool, the restricted positions `no_right` / `no_left`
    (V,) bool, and the sampling (`draw`) and encoding (`encode`) of sequences."""

    def __init__(self, config):
        c = self.config = config
        self.layout = Layout(c.p, c.n_vars)
        self.no_right = np.isin(self.layout.var_names, c.never_right)  # (V,) never right operand
        self.no_left = np.isin(self.layout.var_names, c.never_left)
        # [paper] eval_pools.compute_sel_pairs: the same draw reproduces the authors' split
        pool = [(a, b) for a in range(c.p) for b in range(c.p)]
        seen = random.Random(c.seed).sample(pool, n_seen_pairs(c.p, c.heldout_frac))
        self.held = np.ones((c.p, c.p), dtype=bool)  # (x, y) -> held out of training
        self.held[tuple(np.array(seen).T)] = False
        self._codes = {False: np.flatnonzero(~self.held), True: np.flatnonzero(self.held)}
        v1, v2 = np.meshgrid(np.arange(c.n_vars), np.arange(c.n_vars), indexing="ij")
        bad = self.no_left[v1].astype(int) + self.no_right[v2]
        ok = v1 != v2
        self._var_pairs = {rule: np.stack([v1[m], v2[m]], 1) for rule, m in {
            "allowed": ok & (bad == 0), "restricted": ok & (bad > 0),
            "restricted1": ok & (bad == 1), "restricted2": ok & (bad == 2)}.items()}
        # [paper] uniform over the rows of the authors' (variable, form, pair) table: every
        # variable for +n n, those allowed on the left for +v n and +v v, on the right for +n v
        n_l, n_r = int((~self.no_left).sum()), int((~self.no_right).sum())
        weights = c.form_weights or (c.n_vars, n_l, n_r, n_l)
        self.train_spec = Spec(tuple(float(w) for w in weights), clamp2=True)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "val", "test", *NINE_POOLS, *EXTRA_POOLS)

    def rng(self, *tags) -> np.random.Generator:
        """The random stream of a purpose named by `tags`, seeded by the data seed."""
        return np.random.default_rng(_stream(self.config.seed, *tags))

    def specs(self, split: str) -> list[tuple[str, Spec]]:
        """The (name, sampling distribution) parts a split is drawn from: one, or the nine
        pools of `test`."""
        if split in ("train", "val"):
            return [(split, self.train_spec)]
        if split == "test":
            return list(NINE_POOLS.items())
        if split in NINE_POOLS or split in EXTRA_POOLS:
            return [(split, {**NINE_POOLS, **EXTRA_POOLS}[split])]
        raise UsageError(f"split={split!r} is not a split of task assign_add; "
                         f"choose from {', '.join(self.splits)}")

    def generate(self, split: str) -> Examples:
        """A whole split; `test` stacks the nine pools with a `pool` stratum."""
        specs = self.specs(split)
        n = {"train": self.config.n_train, "val": self.config.n_val}.get(split,
                                                                          self.config.pool_size)
        parts = []
        for i, (name, spec) in enumerate(specs):
            rng = self.rng("split", name)
            ex = self.encode(self.draw(rng, n, spec))
            if split == "test":
                ex.strata["pool"] = np.full(n, i, dtype=np.int64)
            parts.append(ex)
        return _concat(parts)

    def train_batch(self, step: int, batch_size: int) -> Examples:
        """Training batch `step`, sampled afresh from the training distribution (from the
        stream of `batch_seed` where it is set, else of the data seed)."""
        c = self.config
        rng = (self.rng("train_batch", step) if c.batch_seed is None else
               np.random.default_rng(_stream(c.batch_seed, "train_batch", step)))
        return self.encode(self.draw(rng, batch_size, self.train_spec))

    def draw(self, rng, n: int, spec: Spec) -> Draw:
        """n sequences of a sampling distribution [paper: build_sequence / eval_pools]."""
        c, A, V = self.config, self.config.max_assign, self.config.n_vars
        w = np.asarray(spec.forms, dtype=float)
        form = rng.choice(4, size=n, p=w / w.sum())
        codes = self._codes[spec.held_out]
        code = codes[rng.integers(len(codes), size=n)]
        x, y = code // c.p, code % c.p
        na = rng.integers(c.min_assign, A + 1, size=n)
        two = form == 3
        na[two] = (np.maximum(na[two], 2) if spec.clamp2 else
                   rng.integers(max(2, c.min_assign), A + 1, size=int(two.sum())))
        # operand variables: 1-var uniform over the variables the rule allows at that side,
        # 2-var uniform over the (v1, v2) pairs the rule allows [paper]
        restricted = spec.rule != "allowed"
        side_ok = np.where((form == 1)[:, None], self.no_left == restricted,
                           self.no_right == restricted)  # (n, V)
        v_one = masked_choice(rng, side_ok)
        pairs = self._var_pairs[spec.rule]
        v12 = pairs[rng.integers(len(pairs), size=n)]  # (n, 2)
        first = np.select([form == 3, form > 0], [v12[:, 0], v_one], -1)
        second = np.where(two, v12[:, 1], -1)
        # variables in assignment-list order: operand variables first, then distinct
        # distractors in random order (for +n n the first is a uniform variable) [paper]
        keys = rng.random((n, V))
        rows = np.arange(n)
        keys[rows[first >= 0], first[first >= 0]] = -2.0
        keys[rows[two], second[two]] = -1.0
        perm = np.argsort(keys, axis=1)[:, :A]  # (n, A)
        vals = rng.integers(c.p, size=(n, A))
        vals[:, 0] = np.select([form == 2, form > 0], [y, x], vals[:, 0])
        vals[:, 1] = np.where(two, y, vals[:, 1])
        # shuffle the active assignments; inactive ones sort last
        active = np.arange(A) < na[:, None]
        order = np.argsort(np.where(active, rng.random((n, A)), 2.0), axis=1)
        avars = np.where(active, np.take_along_axis(perm, order, 1), -1)
        avals = np.where(active, np.take_along_axis(vals, order, 1), -1)
        where = np.argsort(order, axis=1)  # list index -> slot
        lslot = np.where(LEFT_VAR[form], where[:, 0], -1)
        rslot = np.select([form == 3, form == 2], [where[:, 1], where[:, 0]], -1)
        # each remaining PAD falls into one of the n + 1 gaps uniformly [paper]
        n_pad = c.seq_len - 4 - 2 * na
        max_pad = c.seq_len - 4 - 2 * c.min_assign
        gap = (rng.random((n, max_pad)) * (na + 1)[:, None]).astype(np.int64)
        gap = np.where(np.arange(max_pad) < n_pad[:, None], gap, A + 1)  # A + 1: unused
        gaps = np.bincount((rows[:, None] * (A + 2) + gap).ravel(),
                           minlength=n * (A + 2)).reshape(n, A + 2)[:, :A + 1]
        return Draw(form, na, avars, avals, gaps, lslot, rslot,
                     np.where(LEFT_VAR[form], -1, x), np.where(RIGHT_VAR[form], -1, y))

    def starts(self, d: Draw) -> np.ndarray:
        """(n, A) position of each slot's variable token."""
        return np.cumsum(d.gaps[:, :-1], axis=1) + 2 * np.arange(self.config.max_assign)

    def encode(self, d: Draw) -> Examples:
        """Token ids, labels (the sum at `=`) and strata of drawn sequences."""
        c, n, var0 = self.config, len(d.form), self.layout.var0
        rows, L = np.arange(n), c.seq_len
        ids = np.full((n, L), self.layout.pad_id, dtype=np.int64)  # (n, seq_len)
        starts, active = self.starts(d), d.avars >= 0
        r = np.broadcast_to(rows[:, None], active.shape)[active]
        ids[r, starts[active]] = var0 + d.avars[active]
        ids[r, starts[active] + 1] = d.avals[active]
        for k, (slot, num) in enumerate((d.side(np.zeros(n, bool)), d.side(np.ones(n, bool)))):
            ids[:, L - 3 + k] = np.where(slot >= 0, var0 + d.avars[rows, np.maximum(slot, 0)], num)
        ids[:, L - 4], ids[:, L - 1] = self.layout.plus_id, self.layout.eq_id
        x, y = d.value(np.zeros(n, bool)), d.value(np.ones(n, bool))
        labels = np.full((n, L), IGNORE, dtype=np.int64)
        labels[:, -1] = (x + y) % c.p
        lv, rv = ids[:, L - 3] - var0, ids[:, L - 2] - var0
        n_restr = (d.lslot >= 0) & self.no_left[np.maximum(lv, 0)]
        n_restr = n_restr.astype(np.int64) + ((d.rslot >= 0) & self.no_right[np.maximum(rv, 0)])
        strata = {"n_vars": LEFT_VAR[d.form].astype(np.int64) + RIGHT_VAR[d.form],
                  "form": d.form.astype(np.int64), "pair_held_out": self.held[x, y],
                  "position_restricted": n_restr > 0, "n_restricted": n_restr,
                  "n_assign": d.n_assign.astype(np.int64)}
        return Examples(ids, labels, strata)


def _concat(parts: list[Examples]) -> Examples:
    """The examples of several parts, one after another."""
    if len(parts) == 1:
        return parts[0]
    return Examples(np.concatenate([e.ids for e in parts]),
                    np.concatenate([e.labels for e in parts]),
                    {k: np.concatenate([e.strata[k] for e in parts]) for k in parts[0].strata})
