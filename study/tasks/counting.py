"""Task `counting`: number variables in sequences (Grant, Goodman, McClelland, TMLR 2025).

A sequence is `B`, n demonstration tokens, the trigger `T`, n response tokens, `E`; the
model must reproduce the count n. n is uniform on 1-20 with 4, 9, 14, 17 held out of
training [paper]. Variants [paper, `grantsrb/mas/tasks.py`]: `multi_object` (demos D0/D1/D2
drawn uniformly, response R), `single_object` (D / R), `same_object` (D / D). One vocabulary
serves every variant so that models trained on one can be compared on another.

Void tokens (`task.void_p`, `study/tasks/counting_voids.py`): each step of the demonstration
phase is a void `U` with probability void_p, which changes no count and is never scored
[authors: `unk_p` in `grantsrb/mas/causal_models.py`]. The authors give their transformer
unk_p = 0.2 and their RNNs none (`make_models/make_model_training_files.py`: `unk_p = 0.2`,
`rnn_unk = False`): voids keep a transformer from reading the count off positions. A task
preset cannot depend on the model, and a comparative study must train every architecture
on the same data, so the `paper` preset sets void_p = 0.2 for every model [ours for the
RNNs: `task.void_p=0` trains them exactly as the authors did]; `small` and `smoke` have no
voids. Counterfactual pairs never hold voids (the authors build DAS data with unk_p = 0).

Data. `ids` are right-padded to seq_len = 2 * max_count + 3 (43), plus max_voids (20) with
voids. `labels` hold the next token
at every position from `T` through the last response (so the responses and `E`), IGNORE
elsewhere: an example is correct iff every response token and the `E` are right [paper].
Splits: `train` (n_train, trained counts), `val` (n_val) and `test` (n_test) drawn from the
same trained counts [paper: the authors draw validation from the training distribution; with
one or three demo token types the splits necessarily share sequences], and `heldout`
(n_test sequences of the held-out counts only). Strata: `count`, `variant` (0 multi_object,
1 single_object, 2 same_object), `held_out` (bool).

Counterfactual pairs (for DAS and patching), kind "<model>:<variable>" or "<model>:full"
(every variable of that model, the authors' default "full" swap). Base and source sequences
are drawn afresh, without voids, with counts 1-20, held-out counts included, for every split
but `heldout` (held-out counts only) [authors: `grantsrb/mas/main.py` builds the DAS data
with `hold_outs=[]` and `unk_p=0`]; `task.cf_counts=trained` restricts them to the trained
counts. A position is drawn uniformly in each among the demo and response tokens (not B, T,
E or PAD) [paper: `filters.default_filter`].
The causal model's variables after the source token replace the base's after its token;
the model then generates the rest (`counting_causal`). `base_ids` is that *counterfactual*
sequence: the base up to `base_pos`, then the continuation the intervened model sees if it
emits the counterfactual outputs (the paper feeds models their own outputs). `cf_labels` are
the program's next tokens at positions >= base_pos in its response phase; `base_labels` are
what the unintervened program predicts on the same inputs at the same positions (IGNORE where
that is "some demo token" of several). Pairs whose counterfactual sequence exceeds seq_len,
or that leave nothing scored (an Up-Up swap making the responses outnumber the demos ends
in an unscored `E`), are redrawn [ours]. Pair strata: `count`, `source_count`, `base_phase`,
`source_phase` (0 demo / 1 response at the chosen token) and `value` (the source's value of
the first swapped variable); `Pairs.changed` marks pairs whose cf_labels differ from
base_labels.

Analysis views: probe variables are the causal models' variables after every token
(`variable_values`); attention targets go from the response positions to the trigger, the
demonstrations and `B` [ours].
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting
from study.tasks.base import IGNORE, Examples, Pairs, Task
from study.tasks.counting_causal import DEMO, MODELS, Alphabet, parse_kind
from study.tasks.counting_voids import demo_phase

VOCAB = ("PAD", "B", "E", "T", "D0", "D1", "D2", "D", "R", "U")  # U: the void token
VARIANTS = ("multi_object", "single_object", "same_object")
ALPHABETS = {
    "multi_object": Alphabet(demo=("D0", "D1", "D2"), resp="R"),
    "single_object": Alphabet(demo=("D",), resp="R"),
    "same_object": Alphabet(demo=("D",), resp="D"),
}
_SPLIT_CODE = {"train": 0, "val": 1, "test": 2, "heldout": 3}
CF_COUNTS = ("all", "trained")


@dataclass(frozen=True)
class CountingConfig:
    seed: int = setting(0, "data seed")
    variant: str = setting(
        "multi_object", "which tokens are demonstrated: multi_object | single_object | same_object")
    min_count: int = setting(1, "fewest demonstration tokens [paper]")
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
    max_voids: int = setting(
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
        if not 1 <= self.min_count <= self.max_count:
            raise UsageError(f"task.min_count={self.min_count}, task.max_count="
                             f"{self.max_count}: need 1 <= min_count <= max_count")
        if not self.held_out:
            raise UsageError("task.held_out is empty; give at least one count to hold out")
        for c in self.held_out:
            if not self.min_count <= c <= self.max_count:
                raise UsageError(f"task.held_out={','.join(map(str, self.held_out))}: {c} is "
                                 f"outside task.min_count..task.max_count "
                                 f"({self.min_count}..{self.max_count})")
        if len(set(self.held_out)) == self.max_count - self.min_count + 1:
            raise UsageError(f"task.held_out={','.join(map(str, self.held_out))} leaves no "
                             f"count to train on")
        if not 0.0 <= self.void_p < 1.0:
            raise UsageError(f"task.void_p={self.void_p} must be in [0, 1)")
        if self.max_voids < 0:
            raise UsageError(f"task.max_voids={self.max_voids} must be non-negative")
        if self.cf_counts not in CF_COUNTS:
            raise UsageError(f"task.cf_counts={self.cf_counts!r} is not one of "
                             f"{', '.join(CF_COUNTS)}")
        for name in ("n_train", "n_val", "n_test"):
            if getattr(self, name) < 1:
                raise UsageError(f"task.{name}={getattr(self, name)} must be at least 1")


_PAPER_TRAIN = dict(
    batch_size=128, lr=1e-4, warmup_steps=100,  # [paper]
    # [paper] decay factor 0.5 to a 1e-7 floor: the authors' scheduler
    # (dl_utils/schedulers.py) is lr = peak * (warmup / step) ** 0.5
    schedule="inverse_sqrt", decay_rate=0.5, min_lr=1e-7,
    target_accuracy=1.0,  # [paper] train until validation is perfect
    steps=50_000,  # [ours] a generous cap; training normally stops at target_accuracy
    loss_on="answer",  # [ours] responses + EOS; "all" = every next token
    eval_examples=0,
    # [paper; grantsrb/mas train.py] the authors clip only when `grad_clip` > 0 is set, and
    # neither make_models/config.yaml nor make_model_training_files.py sets it
    grad_clip=0.0,
    # [authors] RNNs free-running in the response phase, transformers teacher-forced
    # (make_model_training_files.py: tforce_train); evaluation is free-running for both
    feed_outputs="auto",
)


@register("task", "counting", config=CountingConfig, presets={
    # [authors] voids for the transformer (make_model_training_files.py: unk_p = 0.2); [ours]
    # for every model, so that every architecture trains on the same data
    "paper": {"void_p": 0.2},
    # [ours] no voids: the quick GRU run; DAS pair counts are the das analysis'
    "small": {},
    "smoke": {"n_train": 64, "n_val": 32, "n_test": 32},
})
class CountingTask(Task):
    """Reproduce the number of demonstration tokens after a trigger (Grant et al. 2025)."""

    name = "counting"
    version = 1
    eval_splits: ClassVar[tuple[str, ...]] = ("val", "test", "heldout")
    causal_variables: ClassVar[tuple[str, ...]] = (
        "up_down:count", "up_down:phase", "up_up:demo_count", "up_up:resp_count",
        "up_up:phase", "ctx_distr:count")
    probe_variable_names: ClassVar[tuple[str, ...]] = causal_variables
    # [paper code: grantsrb/mas configs/*_das.yaml, swap_keys: full] the authors' alignment
    # searches interchange an algorithm's whole state (count and phase) at once
    joint_variables: ClassVar[tuple[str, ...]] = ("up_down:full", "up_up:full")
    counterfactual_kinds: ClassVar[tuple[str, ...]] = causal_variables + joint_variables
    train_presets: ClassVar[dict] = {
        "paper": _PAPER_TRAIN,
        # [ours] a GRU (state 128) on a 2-core CPU within minutes. lr 5e-4 (the paper's 1e-4
        # needs twice the steps): GRU, LSTM and rope2 reach the target as fast as at 3e-3
        # (seed 0: 475, 125 and 125 steps), and the GRU's count is better aligned with an
        # orthogonal map (OAF test IIA at k = 16 on changed pairs 0.92, against 0.67 at 3e-3)
        "small": dict(steps=2000, batch_size=128, lr=5e-4, warmup_steps=50, schedule="exp",
                      decay_rate=0.5, decay_steps=400, min_lr=1e-5, target_accuracy=0.995,
                      loss_on="answer", eval_examples=500, eval_every=25),
        "smoke": dict(steps=20, batch_size=16, lr=1e-3, warmup_steps=2, eval_examples=64,
                      checkpoints=4, loss_on="answer"),
    }

    def __init__(self, config: CountingConfig):
        super().__init__(config)
        self.alphabet = ALPHABETS[config.variant]
        held = set(config.held_out)
        every = range(config.min_count, config.max_count + 1)
        self.trained_counts = np.array([c for c in every if c not in held], dtype=np.int64)
        self.held_out_counts = np.array(sorted(held), dtype=np.int64)
        self._ids = {t: i for i, t in enumerate(VOCAB)}

    # --- vocabulary -------------------------------------------------------------------
    @property
    def vocab(self) -> tuple[str, ...]:
        return VOCAB

    @property
    def seq_len(self) -> int:
        voids = self.config.max_voids if self.config.void_p > 0 else 0
        return 2 * self.config.max_count + 3 + voids

    def render(self, ids: np.ndarray) -> str:
        return " ".join(VOCAB[i] for i in np.asarray(ids).tolist() if i != self.pad_id)

    def label_of(self, labels: np.ndarray) -> list[str]:
        return [VOCAB[i] for i in np.asarray(labels).tolist() if i != IGNORE]

    # --- data -------------------------------------------------------------------------
    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "val", "test", "heldout")

    def counts_of(self, split: str) -> np.ndarray:
        """The counts a split draws from."""
        return self.held_out_counts if split == "heldout" else self.trained_counts

    def pair_counts(self, split: str) -> np.ndarray:
        """The counts counterfactual pairs of a split draw from: `heldout` the held-out
        counts; the others every count (`cf_counts=all`, the authors' DAS data) or the
        trained counts (`cf_counts=trained`)."""
        if split == "heldout" or self.config.cf_counts == "trained":
            return self.counts_of(split)
        return np.arange(self.config.min_count, self.config.max_count + 1, dtype=np.int64)

    def generate(self, split: str) -> Examples:
        c = self.config
        n = {"train": c.n_train, "val": c.n_val, "test": c.n_test, "heldout": c.n_test}[split]
        rng = np.random.default_rng([c.seed, _SPLIT_CODE[split]])
        counts = rng.choice(self.counts_of(split), size=n)  # (n,)
        if c.void_p > 0:
            ids = self._encode_voids(counts, rng)
        else:
            ids = self._encode_batch(counts, rng)
        return Examples(ids, self._labels(ids, counts), self._strata(counts))

    def _encode_voids(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Sequences whose demonstration phase holds void tokens (`counting_voids`) ->
        (n, seq_len) ids: B, demos and voids, T, n responses, E."""
        n, L, a = len(counts), self.seq_len, self.alphabet
        is_void, trig = demo_phase(counts, self.config.void_p, self.config.max_voids, rng)
        demo_ids = np.array(self.encode(a.demo))
        W = is_void.shape[1]
        phase = demo_ids[rng.integers(len(demo_ids), size=(n, W))]  # (n, W)
        phase = np.where(is_void, self._ids["U"], phase)
        phase = np.where(np.arange(W)[None, :] == trig[:, None], self._ids[a.trig], phase)
        ids = np.full((n, L), self.pad_id, dtype=np.int64)
        ids[:, 0] = self._ids[a.bos]
        pos = np.arange(L)[None, :]
        t_pos, N = (trig + 1)[:, None], counts[:, None]  # T's position in the sequence
        ids[:, 1:1 + W] = np.where(np.arange(W)[None, :] <= trig[:, None], phase, self.pad_id)
        ids = np.where((pos > t_pos) & (pos <= t_pos + N), self._ids[a.resp], ids)
        return np.where(pos == t_pos + N + 1, self._ids[a.eos], ids)

    def _encode_batch(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Well-formed sequences of the given counts, no voids -> (n, seq_len) ids."""
        n, L, a = len(counts), self.seq_len, self.alphabet
        demo_ids = np.array(self.encode(a.demo))
        pick = demo_ids[rng.integers(len(demo_ids), size=(n, L))]  # (n, seq_len)
        pos = np.arange(L)[None, :]
        N = counts[:, None]
        ids = np.full((n, L), self.pad_id, dtype=np.int64)
        ids[:, 0] = self._ids[a.bos]
        ids = np.where((pos >= 1) & (pos <= N), pick, ids)
        ids = np.where(pos == N + 1, self._ids[a.trig], ids)
        ids = np.where((pos >= N + 2) & (pos <= 2 * N + 1), self._ids[a.resp], ids)
        return np.where(pos == 2 * N + 2, self._ids[a.eos], ids)

    def _labels(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Next token at positions T .. last response (t .. t+n for T at t; n+1 .. 2n+1
        without voids), IGNORE elsewhere."""
        ids = np.asarray(ids, dtype=np.int64)  # signed: IGNORE (-1) is written among the ids
        pos = np.arange(ids.shape[1])[None, :]
        N, t_pos = counts[:, None], self._trigger_pos(ids)[:, None]
        nxt = np.concatenate([ids[:, 1:], np.full((len(ids), 1), self.pad_id)], axis=1)
        return np.where((pos >= t_pos) & (pos <= t_pos + N), nxt, IGNORE).astype(np.int64)

    def _trigger_pos(self, ids: np.ndarray) -> np.ndarray:
        """(n, pos) ids -> (n,) position of each row's T."""
        return np.argmax(np.asarray(ids) == self._ids[self.alphabet.trig], axis=1)

    def _strata(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        return {"count": counts.astype(np.int64),
                "variant": np.full(len(counts), VARIANTS.index(self.config.variant), np.int64),
                "held_out": np.isin(counts, self.held_out_counts)}

    # --- causal models ------------------------------------------------------------------
    def causal_model(self, name: str):
        """The program `name` ("up_down", "up_up", "ctx_distr") over this variant's tokens."""
        return MODELS[name](self.alphabet)

    def variable_values(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Each causal variable's value after every token of unintervened sequences:
        name -> (n, seq_len) int64, -1 at padding (for probes)."""
        out = {v: np.full(ids.shape, -1, dtype=np.int64) for v in self.causal_variables}
        for i, row in enumerate(ids):
            toks = [VOCAB[t] for t in row.tolist() if t != self.pad_id]
            for model in ("up_down", "up_up", "ctx_distr"):
                states, _ = self.causal_model(model).run(toks)
                for v in MODELS[model].variables:
                    out[f"{model}:{v}"][i, :len(toks)] = [s[v] for s in states]
        return out

    def probe_variables(self, ids: np.ndarray, labels=None) -> dict[str, np.ndarray]:
        """Every causal variable of the three programs (Grant et al. 2025), after each token:
        `up_down:count` etc. (`variable_values`)."""
        return self.variable_values(np.asarray(ids))

    def attention_targets(self, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """From every scored position (T through the last response) to `trigger` (the T
        token), `demos` (the demonstration tokens) and `bos` (B) [ours]; masks (n, pos)."""
        ids = np.asarray(ids)
        n, width = ids.shape
        trig = ids == self._ids[self.alphabet.trig]  # (n, pos)
        t_pos = np.argmax(trig, axis=1)[:, None]  # (n, 1)
        idx = np.arange(width)[None, :]
        demos = np.isin(ids, self.encode(self.alphabet.demo)) & (idx < t_pos)  # voids are not
        query = (idx >= t_pos) & (idx <= t_pos + demos.sum(1, keepdims=True))
        bos = np.broadcast_to(idx == 0, (n, width)).copy()
        return {"trigger": (query, trig), "demos": (query, demos), "bos": (query, bos)}

    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        try:
            model_name, variables = parse_kind(kind)
        except ValueError:
            raise UsageError(f"kind={kind!r} is not a counterfactual kind of counting; choose "
                             f"from {', '.join(self.counterfactual_kinds)}") from None
        if split not in self.splits:
            raise UsageError(f"split={split!r} is not a split of task counting; choose from "
                             f"{', '.join(self.splits)}")
        model, L = self.causal_model(model_name), self.seq_len
        rng = np.random.default_rng([self.config.seed, _SPLIT_CODE[split],
                                     zlib.crc32(kind.encode()), seed, 3])
        rows, tries = [], 0
        while len(rows) < n:
            tries += 1
            if tries > 100 * n + 1000:  # under 15 % are redrawn at the defaults
                raise RuntimeError(f"counting: too few {kind} pairs fit in seq_len {L}")
            row = self._pair(model, variables, split, rng)
            if row is not None:
                rows.append(row)
        cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
        base_ids, source_ids, base_labels, cf_labels, base_pos, source_pos = cols[:6]
        names = ("count", "source_count", "base_phase", "source_phase", "value")
        strata = dict(zip(names, cols[6:]))
        return Pairs(kind, base_ids, source_ids, base_labels, cf_labels, base_pos, source_pos,
                     strata)

    def _pair(self, model, variables, split, rng):
        """One pair as a tuple of rows, or None when the counterfactual sequence is too long."""
        L, a = self.seq_len, self.alphabet
        nb, ns = (int(x) for x in rng.choice(self.pair_counts(split), size=2))
        base, source = (self._tokens(k, rng) for k in (nb, ns))
        bpos, spos = self._position(nb, rng), self._position(ns, rng)
        cf, nxt, scored = model.intervene(base, bpos, source, spos, variables, rng)
        if len(cf) > L or not any(scored[bpos:]):
            return None  # [ours] too long, or nothing left to score (Up-Up's unscored E)
        _, plain = model.run(cf, obj_count=nb)  # unintervened predictions on the same inputs
        cf_lab = np.full(L, IGNORE, np.int64)
        base_lab = np.full(L, IGNORE, np.int64)
        for t in range(bpos, len(cf)):
            if scored[t]:
                cf_lab[t] = self._ids[nxt[t]]
                p = plain[t]
                if p == DEMO and len(a.demo) == 1:
                    p = a.demo[0]
                base_lab[t] = IGNORE if p == DEMO else self._ids[p]
        value = model.run(source)[0][spos][variables[0]]
        return (self._pad(cf), self._pad(source), base_lab, cf_lab, bpos, spos,
                nb, ns, int(bpos > nb), int(spos > ns), value)

    def _tokens(self, count: int, rng) -> list[str]:
        a = self.alphabet
        demos = [a.demo[int(i)] for i in rng.integers(len(a.demo), size=count)]
        return [a.bos, *demos, a.trig, *([a.resp] * count), a.eos]

    @staticmethod
    def _position(count: int, rng) -> int:
        """Uniform over demo positions 1..n and response positions n+2..2n+1."""
        k = int(rng.integers(2 * count))
        return 1 + k if k < count else 2 + k

    def _pad(self, tokens) -> np.ndarray:
        row = np.full(self.seq_len, self.pad_id, np.int64)
        row[:len(tokens)] = self.encode(tokens)
        return row

    # --- heuristics -----------------------------------------------------------------------
    def heuristics(self, split: str = "test") -> list[dict]:
        """Shortcut rules, each naming a number of responses; right iff it equals the count.

        - `modal_count`: always the most frequent training count (ties: the smallest);
        - `subitize_3`: counts exactly up to 3 and answers 3 beyond (a small-number counter);
        - `distinct_demo_types`: the number of distinct demo tokens (1 for one-object variants).
        """
        ex = self.split(split)
        counts = ex.strata["count"]
        train_counts = self.split("train").strata["count"]
        values, freq = np.unique(train_counts, return_counts=True)
        modal = int(values[np.argmax(freq)])
        pos = np.arange(ex.ids.shape[1])[None, :]
        demo = np.isin(ex.ids, self.encode(self.alphabet.demo)) & (
            pos < self._trigger_pos(ex.ids)[:, None])
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
