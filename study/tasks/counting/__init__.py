"""Task `counting`: number variables in sequences (Grant, Goodman, McClelland, TMLR 2025).

A sequence is `B`, n demonstration tokens, the trigger `T`, n response tokens, `E`; the
model must reproduce the count n. n is uniform on 1-20 with 4, 9, 14, 17 held out of
training [paper]. Variants [paper, `grantsrb/mas/tasks.py`]: `multi_object` (demos D0/D1/D2
drawn uniformly, response R), `single_object` (D / R), `same_object` (D / D). One vocabulary
serves every variant so that models trained on one can be compared on another.

Void tokens (`task.void_p`): each step of the demonstration phase is a void `U` with
probability void_p, which changes no count and is never scored [authors: `unk_p` in
`grantsrb/mas/causal_models.py`]. The authors give their transformer unk_p = 0.2 and their
RNNs none (`make_models/make_model_training_files.py`: `unk_p = 0.2`, `rnn_unk = False`):
voids keep a transformer from reading the count off positions. A task preset cannot depend
on the model, and a comparative study must train every architecture on the same data, so the
`paper` preset sets void_p = 0.2 for every model [ours for the RNNs: `task.void_p=0` trains
them exactly as the authors did]; `small` and `smoke` have no voids. Counterfactual pairs
never hold voids (the authors build DAS data with unk_p = 0).

Data. `ids` are right-padded to seq_len = 2 * max_count + 3 (43), plus max_voids (20) with
voids. `labels` hold the next token
at every position from `T` through the last response (so the responses and `E`), IGNORE
elsewhere: an example is correct iff every response token and the `E` are right [paper].
Splits: `train` (n_train, trained counts), `val` (n_val) and `test` (n_test) drawn from the
same trained counts [paper: the authors draw validation from the training distribution; with
one or three demo token types the splits necessarily share sequences], and `heldout`
(n_test sequences of the held-out counts only). Strata: `count`, `variant` (0 multi_object,
1 single_object, 2 same_object), `held_out` (bool).

Counterfactual pairs (for DAS and patching), kind "<model>:<variable>" or "<model>:full",
intervene on the programs up_down, up_up and ctx_distr; `base_ids` is the counterfactual
sequence the intervened program generates. `ctx_distr:count_next` is ctx_distr's count
scored on the next prediction only (the one at the intervened position).

The family's modules, each importing only those listed before it:
- `vocab`: the tokens and the variants' token classes;
- `causal`: the symbolic programs (causal models) and their interventions;
- `generate`: the generator, void tokens included, and the splits;
- `pairs`: the counterfactual pairs;
- `views`: what analyses read (probe variables, attention targets) and the shortcut rules;
- `layout`: every token's role in a sequence (demonstration steps, trigger, responses), the
  atlas's grid.
This module holds the config, the presets and the registered task, which delegates to them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import fixed, setting
from study.tasks.base import IGNORE, Examples, Pairs, Task
from study.tasks.counting import causal, layout, pairs, views
from study.tasks.counting.generate import Generator
from study.tasks.counting.pairs import CF_COUNTS
from study.tasks.counting.vocab import VARIANTS, VOCAB


@dataclass(frozen=True)
class CountingConfig:
    seed: int = setting(0, "data seed")
    variant: str = setting(
        "multi_object", "which tokens are demonstrated: multi_object | single_object | same_object")
    min_count: int = fixed(1, "fewest demonstration tokens [paper]")
    max_count: int = setting(20, "most demonstration tokens [paper]")
    held_out: tuple[int, ...] = setting(
        (4, 9, 14, 17), "counts never trained on, tested in `heldout` [paper]")
    n_train: int = setting(
        1000,
        "[paper] 1,000 training sequences (8 updates an epoch at batch 128)")
    n_val: int = setting(
        500, "validation sequences [paper: grantsrb/mas make_models/config.yaml n_val_samples]")
    n_test: int = setting(1000, "[ours] also the size of `heldout`")
    void_p: float = setting(
        0.0,
        "probability of a void token U at each step of the demonstration phase [authors: "
        "`unk_p`, 0.2 for their transformer, 0 for their RNNs]; the paper preset uses 0.2 "
        "for every model (see the module docstring)")
    max_voids: int = fixed(
        20, "[ours] most voids in one sequence (a row drawing more is drawn again); with "
        "void_p > 0 it lengthens seq_len by as much")
    cf_counts: str = setting(
        "all",
        "counts of the counterfactual pairs of every split but `heldout`: all (min_count.."
        "max_count, held-out counts included) [authors: grantsrb/mas main.py draws the DAS "
        "data with hold_outs=[]] | trained (the training counts only)")

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise UsageError(f"task.variant={self.variant!r} is not a variant; choose from "
                             f"{', '.join(VARIANTS)}")
        if self.seed < 0:
            raise UsageError(f"task.seed={self.seed} must be non-negative")
        if not self.min_count <= self.max_count:
            raise UsageError(f"task.max_count={self.max_count} must be at least "
                             f"{self.min_count}")
        if not self.held_out:
            raise UsageError("task.held_out is empty; give at least one count to hold out")
        for c in self.held_out:
            if not self.min_count <= c <= self.max_count:
                raise UsageError(f"task.held_out={','.join(map(str, self.held_out))}: {c} is "
                                 f"outside {self.min_count}..task.max_count ({self.max_count})")
        if len(set(self.held_out)) == self.max_count - self.min_count + 1:
            raise UsageError(f"task.held_out={','.join(map(str, self.held_out))} leaves no "
                             f"count to train on")
        if not 0.0 <= self.void_p < 1.0:
            raise UsageError(f"task.void_p={self.void_p} must be in [0, 1)")
        if self.cf_counts not in CF_COUNTS:
            raise UsageError(f"task.cf_counts={self.cf_counts!r} is not one of "
                             f"{', '.join(CF_COUNTS)}")
        for name in ("n_train", "n_val", "n_test"):
            if getattr(self, name) < 1:
                raise UsageError(f"task.{name}={getattr(self, name)} must be at least 1")

    def data_bytes(self) -> int:
        """A coarse upper bound of the memory generating and holding every split takes
        (train, val, test and heldout; the generator's per-count tables), checked before the
        task is built."""
        from study.core.memory import split_bytes
        seq_len = 2 * self.max_count + 3 + self.max_voids
        rows = self.n_train + self.n_val + 2 * self.n_test
        return split_bytes(rows, seq_len) + 64 * self.max_count


@register("task", "counting", config=CountingConfig, presets={
    # [authors] voids for the transformer (make_model_training_files.py: unk_p = 0.2); [ours]
    # for every model, so that every architecture trains on the same data
    "paper": {"void_p": 0.2},
    # small: [ours] no voids (the defaults): the quick GRU run; DAS pair counts are the das
    # analysis'
    "smoke": {"n_train": 64, "n_val": 32, "n_test": 32},
})
class CountingTask(Task):
    """Reproduce the number of demonstration tokens after a trigger (Grant et al. 2025)."""

    name = "counting"
    version = 1
    eval_splits: ClassVar[tuple[str, ...]] = ("val", "test", "heldout")
    # ctx_distr:count_next [ours]: ctx_distr's count scored on the one prediction it lives
    # for (`pairs.NEXT`), the form a transformer that recomputes the count can pass
    causal_variables: ClassVar[tuple[str, ...]] = (
        "up_down:count", "up_down:phase", "up_up:demo_count", "up_up:resp_count",
        "up_up:phase", "ctx_distr:count", "ctx_distr:count_next")
    probe_variable_names: ClassVar[tuple[str, ...]] = causal_variables[:-1]
    # [paper code: grantsrb/mas configs/*_das.yaml, swap_keys: full] the authors' alignment
    # searches interchange an algorithm's whole state (count and phase) at once
    joint_variables: ClassVar[tuple[str, ...]] = ("up_down:full", "up_up:full")
    # [paper] Grant et al.'s headline: the count of the up-down algorithm, aligned by OAF
    # and LAF alike
    main_variables: ClassVar[tuple[str, ...]] = ("up_down:count",)
    role_names: ClassVar[tuple[str, ...]] = layout.ROLE_NAMES
    # the count set at one step decides every response after it: the atlas's pairs are drawn
    # at each role (`role_counterfactuals`)
    pairs_by_role: ClassVar[bool] = True
    counterfactual_kinds: ClassVar[tuple[str, ...]] = causal_variables + joint_variables
    train_presets: ClassVar[dict] = {
        "paper": dict(
            batch_size=128, lr=1e-4, warmup_steps=100,  # [paper]
            # [paper] decay factor 0.5 to a 1e-7 floor: the authors' scheduler
            # (dl_utils/schedulers.py) is lr = peak * (warmup / step) ** 0.5
            schedule="inverse_sqrt", decay_rate=0.5, min_lr=1e-7,
            target_accuracy=1.0,  # [paper] train until validation is perfect
            steps=50_000,  # [ours] a generous cap; training normally stops at target_accuracy
            eval_examples=0,
            # [paper; grantsrb/mas train.py] the authors clip only when `grad_clip` > 0 is
            # set, and neither make_models/config.yaml nor make_model_training_files.py sets it
            grad_clip=0.0),
        # the defaults (`TrainConfig`) that are the authors' too: RNNs free-running in the
        # response phase and transformers teacher-forced (feed_outputs=auto) [authors:
        # make_model_training_files.py, tforce_train; evaluation is free-running for both].
        # The loss on the responses and EOS (loss_on=answer) is ours: the authors'
        # seq_models.py LossWrapper scores every next token (loss_on=all, as
        # study=counting-grant trains)
        # [ours] a GRU (state 128) on a 2-core CPU within minutes. lr 5e-4 (the paper's 1e-4
        # needs twice the steps): GRU, LSTM and rope2 reach the target as fast as at 3e-3
        # (seed 0: 475, 125 and 125 steps), and the GRU's count is better aligned with an
        # orthogonal map (OAF test IIA at k = 16 on changed pairs 0.92, against 0.67 at 3e-3)
        "small": dict(steps=2000, batch_size=128, lr=5e-4, warmup_steps=50, schedule="exp",
                      decay_rate=0.5, decay_steps=400, min_lr=1e-5, target_accuracy=0.995,
                      eval_examples=500, eval_every=25),
        "smoke": dict(steps=20, batch_size=16, lr=1e-3, warmup_steps=2, eval_examples=64,
                      checkpoints=4),
    }

    def __init__(self, config: CountingConfig):
        super().__init__(config)
        self.generator = g = Generator(config)
        self.alphabet = g.alphabet
        self.trained_counts, self.held_out_counts = g.trained_counts, g.held_out_counts

    # --- vocabulary -------------------------------------------------------------------
    @property
    def vocab(self) -> tuple[str, ...]:
        return VOCAB

    @property
    def seq_len(self) -> int:
        return self.generator.seq_len

    def render(self, ids: np.ndarray) -> str:
        return " ".join(VOCAB[i] for i in np.asarray(ids).tolist() if i != self.pad_id)

    def label_of(self, labels: np.ndarray) -> list[str]:
        return [VOCAB[i] for i in np.asarray(labels).tolist() if i != IGNORE]

    # --- data (generate.py) -----------------------------------------------------------
    @property
    def splits(self) -> tuple[str, ...]:
        return self.generator.splits

    def counts_of(self, split: str) -> np.ndarray:
        """The counts a split draws from."""
        return self.generator.counts_of(split)

    def generate(self, split: str) -> Examples:
        return self.generator.generate(split)

    def labels_of(self, ids: np.ndarray) -> np.ndarray:
        """The next token the Up-Down program predicts after each token of the sequences
        `ids` where it is scored (T and the responses up to the EOS; IGNORE elsewhere): a
        generated split's labels, and for any other sequence (an intervened trajectory) what
        a network that counts outputs on it."""
        return causal.scored_predictions(np.asarray(ids), self.alphabet, self.pad_id)

    # --- causal models (causal.py, pairs.py) ------------------------------------------
    def causal_model(self, name: str) -> causal.CausalModel:
        """The program `name` ("up_down", "up_up", "ctx_distr") over this variant's tokens."""
        return causal.MODELS[name](self.alphabet)

    def variable_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Each causal variable's value after every token of unintervened sequences:
        name -> (n, seq_len) int64, -1 at padding (for probes)."""
        return causal.variable_values(np.asarray(ids), self.alphabet, self.pad_id)

    def pair_counts(self, split: str) -> np.ndarray:
        """The counts counterfactual pairs of a split draw from (`pairs.pair_counts`)."""
        return pairs.pair_counts(self.generator, split)

    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        return pairs.counterfactuals(self, kind, n, split, seed)

    def role_counterfactuals(self, kind: str, n: int, role: str, split: str = "test",
                             seed: int = 0) -> Pairs:
        return pairs.counterfactuals(self, kind, n, split, seed, role)

    # --- what analyses read (views.py) ------------------------------------------------
    def heuristics(self, split: str = "test") -> list[dict]:
        return views.heuristics(self, split)

    def roles(self, ids: np.ndarray) -> dict[str, np.ndarray]:  # layout.py
        return layout.token_roles(np.asarray(ids), self.config.max_count)

    def probe_variables(self, ids: np.ndarray, labels=None) -> dict[str, np.ndarray]:
        return views.probe_variables(ids, self.alphabet)

    def attention_targets(self, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return views.attention_targets(ids, self.alphabet)

