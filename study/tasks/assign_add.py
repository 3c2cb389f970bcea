"""Task `assign_add`: variable assignment composed with modular addition (Exoo et al. 2026).

A sequence of length 16 [paper, `bexoo/assign-and-add/train.py` `build_sequence`]:
n assignments `[var, value]` (no `=`), shuffled, with the 12 - 2n remaining PADs dropped one
by one into uniformly chosen gaps among the n + 1 gaps, then the core `+ lhs rhs =`; the
label (x + y) mod 59 is predicted at the last position (`labels` IGNORE elsewhere; a number's
token id is the number itself). Example: `PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + a 27 =` -> 8.
Forms (the authors' `typ`, our stratum `form`): 0 `+ n n`, 1 `+ v n`, 2 `+ n v`, 3 `+ v v`
(v1 != v2). Operand variables are assigned exactly once; the other assignments (distractors)
use further distinct variables with uniform values [paper]. n is uniform on 1-6; a 2-var
training sequence clamps n up to 2 (so n = 2 has weight 2/6) [paper: `build_sequence`], the
2-var evaluation pools draw n uniform on 2-6 [paper: `eval_pools._build_prefix_and_core_2var`].
A 0-var sequence still holds at least one assignment, on a uniform variable [paper].

Held out of training [paper]: 30 % of the 59^2 operand pairs (x, y) in every form, chosen as
the authors do (`random.Random(seed).sample` of the row-major pair list keeps floor(0.7 * 59^2)
= 2436 pairs; the default data seed 42 is theirs, so the held-out set is the paper's), and
restricted positions: `a`, `b` never the right operand, `k`, `l` never the left one (in 2-var
sequences too). Training draws uniformly over the authors' table of (variable, form, pair)
rows, which weights the forms 12 : 10 : 10 : 10 (`form_weights` overrides this).

Splits. `train_batch(step, b)` samples training batches on the fly, a pure function of
(config, step); `train` is a finite sample of the same distribution (n_train, for probes and
`study sample`), `val` a fresh held-in sample (n_val). The nine evaluation pools are the
authors' `SPECIAL_POOL_KINDS` (pool_size each), named `var{0,1,2}_{seen,heldout}_...`:
var0_seen, var0_heldout; var1_seen_allowed, var1_seen_restricted, var1_heldout_allowed;
var2_seen_allowed, var2_seen_restricted1 (exactly one operand variable in a restricted
position), var2_seen_restricted2 (both), var2_heldout_allowed. The paper crosses held-out
pairs with restricted positions only in a training-time monitor; we add those two pools as
`var1_heldout_restricted` and `var2_heldout_restricted` (>= 1 restricted) [ours], outside
`eval_splits`. `test` is the nine pools stacked [ours], with a `pool` stratum (index into
`NINE_POOLS`). Strata: n_vars (0/1/2), form, pair_held_out, position_restricted,
n_restricted (0/1/2), n_assign.

Causal model: x = value of the left operand, y = value of the right one, answer (x + y) mod p;
`operands(ids)` resolves them. Counterfactual kinds (`x`, `y` are aliases of the first two):
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
token of its assignment), the natural single-position patching site.

The pairs are built in `study/tasks/assign_add_pairs.py`, the shortcut rules scored in
`study/tasks/assign_add_shortcuts.py`. What analyses read (probe variables, attention targets, the
facts behind the authors' progress measures; the `pool` stratum reads as the pool's name) is
in `study/tasks/assign_add_views.py`.
"""
from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting
from study.tasks.base import IGNORE, Examples, Pairs, Task

FORMS = ("+n n", "+v n", "+n v", "+v v")  # index = stratum `form` = the authors' `typ`
_LEFT_VAR = np.array([False, True, False, True])
_RIGHT_VAR = np.array([False, False, True, True])


@dataclass(frozen=True)
class AssignAddConfig:
    seed: int = setting(42, "data seed: held-out pairs and every sample [paper: SEED = 42]")
    p: int = setting(59, "modulus [paper]")
    n_vars: int = setting(12, "variables a.. [paper]")
    seq_len: int = setting(16, "tokens per sequence [paper]")
    min_assign: int = setting(1, "fewest assignments before the query [paper]")
    max_assign: int = setting(6, "most assignments before the query [paper] (SEQ_LEN - 4) // 2")
    heldout_frac: float = setting(0.3, "[paper] TRAIN_PAIRS_FRAC = 0.7")
    never_right: tuple[str, ...] = setting(("a", "b"), "[paper] LEFT_RESTRICT_VARS")
    never_left: tuple[str, ...] = setting(("k", "l"), "[paper] RIGHT_RESTRICT_VARS")
    form_weights: Optional[tuple[float, float, float, float]] = setting(
        None,
        "training weights of +n n, +v n, +n v, +v v; none = the authors' table (12, 10, 10, "
        "10) [paper]")
    pool_size: int = setting(2000, "[paper] examples per evaluation pool")
    n_train: int = setting(20_000, "[ours] finite sample of the training distribution")
    n_val: int = setting(2000, "validation examples [ours]")

    def __post_init__(self):
        def bad(key, value, allowed):
            raise UsageError(f"task.{key}={value!r}: {allowed}")
        if self.seed < 0:
            bad("seed", self.seed, "must be non-negative")
        if self.p < 2:
            bad("p", self.p, "must be at least 2")
        if not 2 <= self.n_vars <= 26:
            bad("n_vars", self.n_vars, "must be in 2..26 (variables a..z)")
        if not 1 <= self.min_assign <= self.max_assign:
            bad("min_assign", self.min_assign, f"must be in 1..task.max_assign ({self.max_assign})")
        if not 2 <= self.max_assign <= self.n_vars:
            bad("max_assign", self.max_assign, f"must be in 2..task.n_vars ({self.n_vars})")
        if self.seq_len < 4 + 2 * self.max_assign:
            bad("seq_len", self.seq_len, f"must be at least 4 + 2 * task.max_assign "
                f"({4 + 2 * self.max_assign})")
        n_held = self.p ** 2 - n_seen_pairs(self.p, self.heldout_frac)
        if not 0 < self.heldout_frac < 1 or not 0 < n_held < self.p ** 2:
            bad("heldout_frac", self.heldout_frac, f"must leave at least one pair on each side "
                f"of the split (0 < frac < 1; {self.p ** 2} pairs)")
        names = [chr(ord("a") + i) for i in range(self.n_vars)]
        for key in ("never_right", "never_left"):
            value = getattr(self, key)
            if not value or len(set(value)) != len(value) or not set(value) <= set(names):
                bad(key, ",".join(value), f"must be distinct variables among {names[0]}.."
                    f"{names[-1]}, at least one")
        if set(self.never_right) & set(self.never_left) or \
                len(set(self.never_right) | set(self.never_left)) >= self.n_vars:
            bad("never_left", ",".join(self.never_left), "must be disjoint from task.never_right "
                "and leave at least one variable free in both positions")
        if self.form_weights is not None and (len(self.form_weights) != 4 or min(
                self.form_weights) < 0 or sum(self.form_weights) <= 0):
            bad("form_weights", self.form_weights, "must be 4 non-negative weights with a "
                "positive sum (+n n, +v n, +n v, +v v)")
        for key in ("pool_size", "n_train", "n_val"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")


def n_seen_pairs(p: int, heldout_frac: float) -> int:
    """Pairs kept for training: floor((1 - frac) p^2) [paper: NUMS_TRAIN_PAIRS]."""
    return math.floor((1 - heldout_frac) * p * p + 1e-9)


@dataclass(frozen=True)
class _Spec:
    """A sampling distribution: form weights, pair side, variable-position rule, 2-var n rule.
    rule: allowed | restricted (1-var: the variable; 2-var: at least one) | restricted1 |
    restricted2 (2-var: exactly one / both operand variables in restricted positions)."""

    forms: tuple[float, float, float, float]
    held_out: bool = False
    rule: str = "allowed"
    clamp2: bool = False  # 2-var n: max(2, n) as in training, else uniform on 2..max


_V1, _V2 = (0, 1, 1, 0), (0, 0, 0, 1)
NINE_POOLS: dict[str, _Spec] = {  # [paper] eval_pools.SPECIAL_POOL_KINDS, in its order
    "var0_seen": _Spec((1, 0, 0, 0)),
    "var0_heldout": _Spec((1, 0, 0, 0), held_out=True),
    "var1_seen_allowed": _Spec(_V1),
    "var1_seen_restricted": _Spec(_V1, rule="restricted"),
    "var1_heldout_allowed": _Spec(_V1, held_out=True),
    "var2_seen_allowed": _Spec(_V2),
    "var2_seen_restricted1": _Spec(_V2, rule="restricted1"),
    "var2_seen_restricted2": _Spec(_V2, rule="restricted2"),
    "var2_heldout_allowed": _Spec(_V2, held_out=True),
}
EXTRA_POOLS: dict[str, _Spec] = {  # [ours] held-out pair x restricted position
    "var1_heldout_restricted": _Spec(_V1, held_out=True, rule="restricted"),
    "var2_heldout_restricted": _Spec(_V2, held_out=True, rule="restricted"),
}


@dataclass
class _Draw:
    """The generative state of n sequences; ids are a function of it (`_encode`).
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

    def copy(self) -> "_Draw":
        return _Draw(**{k: v.copy() for k, v in vars(self).items()})

    def take(self, idx) -> "_Draw":
        return _Draw(**{k: v[idx] for k, v in vars(self).items()})

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


def _masked_choice(rng, mask: np.ndarray) -> np.ndarray:
    """Uniform index of a True entry per row of a (n, k) mask (0 where a row has none)."""
    return np.argmax(np.where(mask, rng.random(mask.shape), -1.0), axis=1)


@register("task", "assign_add", config=AssignAddConfig, presets={
    "paper": {},
    "small": dict(pool_size=500, n_train=5000, n_val=500),
    "smoke": dict(pool_size=100, n_train=500, n_val=100),
})
class AssignAddTask(Task):
    """Variable assignment composed with modular addition (Exoo et al. 2026)."""

    name = "assign_add"
    version = 1
    # `test` (the nine pools stacked, with the `pool` stratum) is the headline split the report
    # and the heuristics compare against; the pools give the per-pool trajectories
    eval_splits: ClassVar[tuple[str, ...]] = ("val", "test", *NINE_POOLS)
    causal_variables: ClassVar[tuple[str, ...]] = ("x", "y")
    probe_variable_names: ClassVar[tuple[str, ...]] = ("x", "y", "sum", "var_of_num")
    counterfactual_kinds: ClassVar[tuple[str, ...]] = ("lhs_value", "rhs_value", "binding",
                                                       "operand_var")
    _PAPER_TRAIN = dict(steps=40_000, batch_size=512, lr=1e-3, weight_decay=0.02,
                        betas=(0.9, 0.999), warmup_steps=0,
                        schedule="constant",  # [ours] the paper names none; train.py has none
                        grad_clip=0.0,  # [paper] train.py does not clip
                        loss_on="answer", eval_examples=2000)
    train_presets: ClassVar[dict] = {
        "paper": _PAPER_TRAIN,
        # [ours] every pool >= 0.95 within 30 minutes on a 2-core CPU: the variable pools rise
        # at lr 3e-3 in about 3,500 steps (at the paper's 1e-3: allowed ones 0.96 by step
        # 10,400, restricted ones 0.48-0.73); halving it every 4,000 steps lets them settle
        "small": {**_PAPER_TRAIN, "steps": 12_000, "batch_size": 256, "lr": 3e-3,
                  "warmup_steps": 200, "schedule": "exp", "decay_rate": 0.5, "decay_steps": 4000,
                  "min_lr": 1e-5, "eval_examples": 500, "eval_every": 250},
        "smoke": {**_PAPER_TRAIN, "steps": 20, "batch_size": 32, "eval_examples": 100,
                  "checkpoints": 4},
    }

    def __init__(self, config: AssignAddConfig):
        super().__init__(config)
        c = config
        self.var_names = tuple(chr(ord("a") + i) for i in range(c.n_vars))
        self._vocab = (*map(str, range(c.p)), "+", "=", "PAD", *self.var_names)
        self.plus_id, self.eq_id, self.var0 = c.p, c.p + 1, c.p + 3
        self.no_right = np.isin(self.var_names, c.never_right)  # (V,) never the right operand
        self.no_left = np.isin(self.var_names, c.never_left)
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
        self.train_spec = _Spec(tuple(float(w) for w in weights), clamp2=True)

    # --- vocabulary -------------------------------------------------------------------
    @property
    def vocab(self) -> tuple[str, ...]:
        return self._vocab

    @property
    def seq_len(self) -> int:
        return self.config.seq_len

    @property
    def output_ids(self) -> tuple[int, ...]:
        """The p numbers (token id = number): the authors score `logits[:, -1, :MOD]`
        (`bexoo/assign-and-add` train.py) [paper]."""
        return tuple(range(self.config.p))

    def render(self, ids: np.ndarray) -> str:
        return " ".join(self._vocab[int(i)] for i in ids)

    def label_of(self, labels: np.ndarray):
        return int(self._vocab[int(labels[labels != IGNORE][-1])])

    # --- data -------------------------------------------------------------------------
    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "val", "test", *NINE_POOLS, *EXTRA_POOLS)

    def _specs(self, split: str) -> list[tuple[str, _Spec]]:
        if split in ("train", "val"):
            return [(split, self.train_spec)]
        if split == "test":
            return list(NINE_POOLS.items())
        if split in NINE_POOLS or split in EXTRA_POOLS:
            return [(split, {**NINE_POOLS, **EXTRA_POOLS}[split])]
        raise UsageError(f"split={split!r} is not a split of task {self.name}; "
                         f"choose from {', '.join(self.splits)}")

    def generate(self, split: str) -> Examples:
        specs = self._specs(split)
        n = {"train": self.config.n_train, "val": self.config.n_val}.get(split,
                                                                          self.config.pool_size)
        parts = []
        for i, (name, spec) in enumerate(specs):
            rng = np.random.default_rng(_stream(self.config.seed, "split", name))
            ex = self._encode(self._draw(rng, n, spec))
            if split == "test":
                ex.strata["pool"] = np.full(n, i, dtype=np.int64)
            parts.append(ex)
        return _concat(parts)

    def train_batch(self, step: int, batch_size: int) -> Examples:
        rng = np.random.default_rng(_stream(self.config.seed, "train_batch", step))
        return self._encode(self._draw(rng, batch_size, self.train_spec))

    def _draw(self, rng, n: int, spec: _Spec) -> _Draw:
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
        v_one = _masked_choice(rng, side_ok)
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
        lslot = np.where(_LEFT_VAR[form], where[:, 0], -1)
        rslot = np.select([form == 3, form == 2], [where[:, 1], where[:, 0]], -1)
        # each remaining PAD falls into one of the n + 1 gaps uniformly [paper]
        n_pad = c.seq_len - 4 - 2 * na
        max_pad = c.seq_len - 4 - 2 * c.min_assign
        gap = (rng.random((n, max_pad)) * (na + 1)[:, None]).astype(np.int64)
        gap = np.where(np.arange(max_pad) < n_pad[:, None], gap, A + 1)  # A + 1: unused
        gaps = np.bincount((rows[:, None] * (A + 2) + gap).ravel(),
                           minlength=n * (A + 2)).reshape(n, A + 2)[:, :A + 1]
        return _Draw(form, na, avars, avals, gaps, lslot, rslot,
                     np.where(_LEFT_VAR[form], -1, x), np.where(_RIGHT_VAR[form], -1, y))

    def _starts(self, d: _Draw) -> np.ndarray:
        """(n, A) position of each slot's variable token."""
        return np.cumsum(d.gaps[:, :-1], axis=1) + 2 * np.arange(self.config.max_assign)

    def _encode(self, d: _Draw) -> Examples:
        c, n = self.config, len(d.form)
        rows, L = np.arange(n), c.seq_len
        ids = np.full((n, L), self.pad_id, dtype=np.int64)  # (n, seq_len)
        starts, active = self._starts(d), d.avars >= 0
        r = np.broadcast_to(rows[:, None], active.shape)[active]
        ids[r, starts[active]] = self.var0 + d.avars[active]
        ids[r, starts[active] + 1] = d.avals[active]
        for k, (slot, num) in enumerate((d.side(np.zeros(n, bool)), d.side(np.ones(n, bool)))):
            ids[:, L - 3 + k] = np.where(slot >= 0, self.var0 + d.avars[rows, np.maximum(slot, 0)],
                                         num)
        ids[:, L - 4], ids[:, L - 1] = self.plus_id, self.eq_id
        x, y = d.value(np.zeros(n, bool)), d.value(np.ones(n, bool))
        labels = np.full((n, L), IGNORE, dtype=np.int64)
        labels[:, -1] = (x + y) % c.p
        lv, rv = ids[:, L - 3] - self.var0, ids[:, L - 2] - self.var0
        n_restr = (d.lslot >= 0) & self.no_left[np.maximum(lv, 0)]
        n_restr = n_restr.astype(np.int64) + ((d.rslot >= 0) & self.no_right[np.maximum(rv, 0)])
        strata = {"n_vars": _LEFT_VAR[d.form].astype(np.int64) + _RIGHT_VAR[d.form],
                  "form": d.form.astype(np.int64), "pair_held_out": self.held[x, y],
                  "position_restricted": n_restr > 0, "n_restricted": n_restr,
                  "n_assign": d.n_assign.astype(np.int64)}
        return Examples(ids, labels, strata)

    # --- analysis views (study/tasks/assign_add_views.py) --------------------------------------
    def probe_variables(self, ids: np.ndarray, labels=None) -> dict[str, np.ndarray]:
        from study.tasks.assign_add_views import probe_variables
        return probe_variables(self, np.asarray(ids))

    def attention_targets(self, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        from study.tasks.assign_add_views import attention_targets
        return attention_targets(self, np.asarray(ids))

    def progress_measures(self):
        from study.tasks.assign_add_views import progress_measures
        return progress_measures(self)

    def stratum_label(self, name: str, value) -> str:
        """`pool` is an index into `NINE_POOLS`: it reads as the pool's name."""
        if name == "pool":
            return f"pool={list(NINE_POOLS)[int(value)]}"
        return super().stratum_label(name, value)

    # --- causal model -----------------------------------------------------------------
    def operands(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x, y): the operand values of (n, seq_len) sequences, variables resolved from the
        prefix (the symbolic model's variables)."""
        ids = np.asarray(ids, dtype=np.int64)  # number tokens are values, tok - var0 an index
        value_of = self._assigned(ids)  # (n, V)
        out = []
        for tok in (ids[:, -3], ids[:, -2]):
            is_var = tok >= self.var0
            out.append(np.where(is_var, value_of[np.arange(len(tok)),
                                                 np.where(is_var, tok - self.var0, 0)], tok))
        return out[0], out[1]

    def _assigned(self, ids: np.ndarray) -> np.ndarray:
        """(n, V) value assigned to each variable in the prefix, -1 if unassigned."""
        n, P = ids.shape[0], ids.shape[1] - 4
        value_of = np.full((n, self.config.n_vars), -1, dtype=np.int64)
        for j in range(P - 1):
            m = ids[:, j] >= self.var0
            value_of[np.flatnonzero(m), ids[m, j] - self.var0] = ids[m, j + 1]
        return value_of

    # --- counterfactual pairs (study/tasks/assign_add_pairs.py) ---------------------------------
    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        from study.tasks.assign_add_pairs import counterfactuals
        return counterfactuals(self, kind, n, split, seed)

    # --- shortcuts (study/tasks/assign_add_shortcuts.py) ----------------------------------------
    def heuristics(self, split: str = "test") -> list[dict]:
        from study.tasks.assign_add_shortcuts import heuristics
        return heuristics(self, split)


def _concat(parts: list[Examples]) -> Examples:
    if len(parts) == 1:
        return parts[0]
    return Examples(np.concatenate([e.ids for e in parts]),
                    np.concatenate([e.labels for e in parts]),
                    {k: np.concatenate([e.strata[k] for e in parts]) for k in parts[0].strata})
