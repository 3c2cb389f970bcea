"""Task `assign_add`: variable assignment composed with modular addition (Exoo et al. 2026).

A sequence of length 16 [paper, `bexoo/assign-and-add/train.py` `build_sequence`]:
n assignments `[var, value]` (no `=`), shuffled, with the remaining PADs in random gaps, then
the core `+ lhs rhs =`; the label (x + y) mod 59 is predicted at the last position (`labels`
IGNORE elsewhere; a number's token id is the number itself). Example:
`PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + a 27 =` -> 8. Forms (the authors' `typ`, our
stratum `form`): 0 `+ n n`, 1 `+ v n`, 2 `+ n v`, 3 `+ v v` (v1 != v2).

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
`operands(ids)` resolves them. Counterfactual kinds: `lhs_value`, `rhs_value` (aliases `x`,
`y`), `binding`, `operand_var`.

The family's modules, each importing only those listed before it:
- `vocab`: the token ids, the forms and where tokens sit;
- `causal`: the symbolic model (`operands`);
- `generate`: the sampler, the held-out pairs and positions, the pools and splits;
- `pairs`: the counterfactual pairs;
- `views`: what analyses read (probe variables, attention targets, the facts behind the
  authors' progress measures) and the shortcut rules;
- `published`: Exoo et al.'s released run scored on the nine pools, the curves reports draw a
  run's pools against (`exoo2026_released_run.csv`).
This module holds the config, the presets and the registered task, which delegates to them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import derived, fixed, set_derived, setting
from study.tasks.assign_add import causal, layout, pairs, published, views
from study.tasks.assign_add.generate import NINE_POOLS, Generator, n_seen_pairs
from study.tasks.base import IGNORE, Examples, Pairs, Task


@dataclass(frozen=True)
class AssignAddConfig:
    # settings added after runs were made: left out of a run's identity while unset, so that
    # those runs keep their directories (`RunConfig.identity`)
    unset_outside_identity: ClassVar[tuple[str, ...]] = ("batch_seed",)
    seed: int = setting(42, "data seed: held-out pairs and every sample [paper: SEED = 42]")
    batch_seed: Optional[int] = setting(
        None, "seed of the stream of training batches alone [ours]: another stream over the "
        "same held-out pairs and evaluation pools; none: the data seed's own stream")
    p: int = setting(59, "modulus [paper]")
    n_vars: int = setting(12, "variables a.. [paper]")
    seq_len: int = setting(16, "tokens per sequence [paper]; it sets max_assign")
    min_assign: int = fixed(1, "fewest assignments before the query [paper]")
    max_assign: int = derived("most assignments before the query: (seq_len - 4) // 2 [paper]")
    heldout_frac: float = setting(0.3, "[paper] TRAIN_PAIRS_FRAC = 0.7")
    never_right: tuple[str, ...] = fixed(("a", "b"), "variables never the right operand "
                                         "[paper] LEFT_RESTRICT_VARS")
    never_left: tuple[str, ...] = fixed(("k", "l"), "variables never the left operand "
                                        "[paper] RIGHT_RESTRICT_VARS")
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
        if self.batch_seed is not None and self.batch_seed < 0:
            bad("batch_seed", self.batch_seed, "must be none or non-negative")
        if self.p < 2:
            bad("p", self.p, "must be at least 2")
        if not 2 <= self.n_vars <= 26:
            bad("n_vars", self.n_vars, "must be in 2..26 (variables a..z)")
        set_derived(self, "max_assign", (self.seq_len - 4) // 2)
        if not 2 <= self.max_assign <= self.n_vars:
            bad("seq_len", self.seq_len, f"must be in 8..{4 + 2 * self.n_vars + 1}: "
                f"(seq_len - 4) // 2 assignments, 2..task.n_vars ({self.n_vars}), at most")
        n_held = self.p ** 2 - n_seen_pairs(self.p, self.heldout_frac)
        if not 0 < self.heldout_frac < 1 or not 0 < n_held < self.p ** 2:
            bad("heldout_frac", self.heldout_frac, f"must leave at least one pair on each side "
                f"of the split (0 < frac < 1; {self.p ** 2} pairs)")
        restricted = sorted({*self.never_right, *self.never_left})
        if self.n_vars <= ord(restricted[-1]) - ord("a"):
            bad("n_vars", self.n_vars, f"must be at least {ord(restricted[-1]) - ord('a') + 1}: "
                f"the restricted variables {', '.join(restricted)} are among them")
        if self.form_weights is not None and (len(self.form_weights) != 4 or min(
                self.form_weights) < 0 or sum(self.form_weights) <= 0):
            bad("form_weights", self.form_weights, "must be 4 non-negative weights with a "
                "positive sum (+n n, +v n, +n v, +v v)")
        for key in ("pool_size", "n_train", "n_val"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")

    def data_bytes(self) -> int:
        """A coarse upper bound of the memory generating and holding every split takes
        (train, val and the nine evaluation pools), checked before the task is built."""
        from study.core.memory import split_bytes
        return split_bytes(self.n_train + self.n_val + 9 * self.pool_size, self.seq_len)


@register("task", "assign_add", config=AssignAddConfig, presets={
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
    # [ours] the routing of the variable pools (Exoo et al.'s spike): the one-variable pools
    # with the operand where it may sit, seen and held-out pairs, rise together (the released
    # run: 0.75 at step 5,301, >= 0.95 at 5,401); the two-variable ones follow within 600 steps
    transition_splits: ClassVar[tuple[str, ...]] = ("var1_seen_allowed", "var1_heldout_allowed")
    causal_variables: ClassVar[tuple[str, ...]] = ("x", "y")
    role_names: ClassVar[tuple[str, ...]] = layout.ROLE_NAMES
    probe_variable_names: ClassVar[tuple[str, ...]] = ("x", "y", "sum", "var_of_num")
    counterfactual_kinds: ClassVar[tuple[str, ...]] = ("lhs_value", "rhs_value", "binding",
                                                       "operand_var")
    train_presets: ClassVar[dict] = {
        "paper": dict(steps=40_000, batch_size=512, lr=1e-3, weight_decay=0.02,
                      schedule="constant",  # [ours] the paper names none; train.py has none
                      grad_clip=0.0,  # [paper] train.py does not clip
                      # [paper code] train.py scores its pools every 100 updates
                      # (EVAL_EVERY); [ours] 64 checkpoints, so that the progress measures
                      # have several on each side of both transitions
                      eval_every=100, checkpoints=64),
        # [ours] every pool >= 0.95 within 30 minutes on a 2-core CPU: the variable pools rise
        # at lr 3e-3 in about 3,500 steps (at the paper's 1e-3: allowed ones 0.96 by step
        # 10,400, restricted ones 0.48-0.73); halving it every 4,000 steps lets them settle
        "small": dict(steps=12_000, batch_size=256, lr=3e-3, weight_decay=0.02,
                      warmup_steps=200, schedule="exp", decay_rate=0.5, decay_steps=4000,
                      min_lr=1e-5, grad_clip=0.0, eval_examples=500, eval_every=250),
        "smoke": dict(steps=20, batch_size=32, lr=1e-3, weight_decay=0.02, schedule="constant",
                      grad_clip=0.0, eval_examples=100, checkpoints=4),
    }

    def __init__(self, config: AssignAddConfig):
        super().__init__(config)
        self.generator = g = Generator(config)
        self.layout = g.layout
        self._vocab = g.layout.tokens
        self.var_names = g.layout.var_names
        self.plus_id, self.eq_id, self.var0 = g.layout.plus_id, g.layout.eq_id, g.layout.var0
        self.no_right, self.no_left = g.no_right, g.no_left  # (V,) restricted positions
        self.held = g.held  # (x, y) -> held out of training

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

    # --- data (generate.py) -----------------------------------------------------------
    @property
    def splits(self) -> tuple[str, ...]:
        return self.generator.splits

    def generate(self, split: str) -> Examples:
        return self.generator.generate(split)

    def train_batch(self, step: int, batch_size: int) -> Examples:
        return self.generator.train_batch(step, batch_size)

    # --- causal model (causal.py, pairs.py) -------------------------------------------
    def roles(self, ids: np.ndarray) -> dict[str, np.ndarray]:  # layout.py
        return layout.token_roles(np.asarray(ids), self.layout, self.config.max_assign)

    def operands(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x, y): the operand values of (n, seq_len) sequences, variables resolved from the
        prefix (the symbolic model's variables)."""
        return causal.operands(ids, self.layout)

    def labels_of(self, ids: np.ndarray) -> np.ndarray:
        """(x + y) mod p at the last position of the sequences `ids`, IGNORE elsewhere."""
        ids = np.asarray(ids)
        x, y = self.operands(ids)
        out = np.full(ids.shape, IGNORE, np.int64)
        out[:, -1] = (x + y) % self.config.p
        return out

    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        return pairs.counterfactuals(self, kind, n, split, seed)

    # --- what analyses read (views.py) ------------------------------------------------
    def heuristics(self, split: str = "test") -> list[dict]:
        return views.heuristics(self, split)

    def reference_curves(self) -> list[dict]:
        """Exoo et al.'s released run on the nine pools, where this run's pools are theirs."""
        return published.curves(self.config, type(self.config)())

    def probe_variables(self, ids: np.ndarray, labels=None) -> dict[str, np.ndarray]:
        return views.probe_variables(self, np.asarray(ids))

    def attention_targets(self, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return views.attention_targets(self, np.asarray(ids))

    def progress_measures(self):
        return views.progress_measures(self)

    def stratum_label(self, name: str, value) -> str:
        """`pool` is an index into `NINE_POOLS`: it reads as the pool's name."""
        if name == "pool":
            return f"pool={list(NINE_POOLS)[int(value)]}"
        return super().stratum_label(name, value)
