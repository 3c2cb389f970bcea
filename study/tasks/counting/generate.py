"""The generator of counting sequences and their splits (Grant, Goodman, McClelland 2025).

A sequence of count n is `B`, n demonstration tokens, `T`, n response tokens, `E`, then PADs
to seq_len = 2 * max_count + 3 (43), plus max_voids (20) with voids. n is drawn uniformly
from the counts of the split: the trained ones (every count in min_count..max_count but
`held_out`) for `train`, `val` and `test`, the held-out ones for `heldout`. `labels` hold
the next token at every position from `T` through the last response (so the responses and
`E`), IGNORE elsewhere [paper].

Void tokens (`task.void_p`). The authors' causal model emits, at every step of the
demonstration phase, a void token `U` with probability `unk_p` and otherwise what the phase
calls for: a demo token, or the trigger once the demos are complete
(`grantsrb/mas/causal_models.py`, `CountUpDown.get_token`: `if np.random.random() <
varbs["unk_p"]: return unk_token_id`). A void leaves every count unchanged and is never
scored (task mask 0). So the demonstration phase of a sequence of count n is n demo tokens
and the trigger, count + 1 "real" emissions, with a void before each of them, each
independently, until the real one comes: voids may precede the first demo and follow the
last demo before the trigger (`demo_phase`).

[ours] Sequences need a bounded length: a row drawing more than `max_voids` voids is drawn
again (at p = 0.2 and n = 20 that is about one row in 10**7 at max_voids = 20).
"""
from __future__ import annotations

import numpy as np

from study.tasks.base import IGNORE, Examples
from study.tasks.counting.vocab import ALPHABETS, ID, VARIANTS

PAD = ID["PAD"]
SPLIT_CODE = {"train": 0, "val": 1, "test": 2, "heldout": 3}  # each split's random stream


class Generator:
    """The splits of one counting config (a `CountingConfig`): its variant's `alphabet`, the
    `trained_counts` and `held_out_counts`, and the sequences of given counts."""

    def __init__(self, config):
        self.config = config
        self.alphabet = ALPHABETS[config.variant]
        held = set(config.held_out)
        every = range(config.min_count, config.max_count + 1)
        self.trained_counts = np.array([c for c in every if c not in held], dtype=np.int64)
        self.held_out_counts = np.array(sorted(held), dtype=np.int64)

    @property
    def seq_len(self) -> int:
        voids = self.config.max_voids if self.config.void_p > 0 else 0
        return 2 * self.config.max_count + 3 + voids

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(SPLIT_CODE)

    def rng(self, *tags) -> np.random.Generator:
        """The random stream of a purpose named by integer `tags`, seeded by the data seed."""
        return np.random.default_rng([self.config.seed, *tags])

    def counts_of(self, split: str) -> np.ndarray:
        """The counts a split draws from."""
        return self.held_out_counts if split == "heldout" else self.trained_counts

    def generate(self, split: str) -> Examples:
        """A whole split: counts drawn from the split's counts, then the sequences."""
        c = self.config
        n = {"train": c.n_train, "val": c.n_val, "test": c.n_test, "heldout": c.n_test}[split]
        rng = self.rng(SPLIT_CODE[split])
        counts = rng.choice(self.counts_of(split), size=n)  # (n,)
        if c.void_p > 0:
            ids = self._encode_voids(counts, rng)
        else:
            ids = self._encode_batch(counts, rng)
        return Examples(ids, self.labels(ids, counts), self._strata(counts))

    def _encode_voids(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Sequences whose demonstration phase holds void tokens (`demo_phase`) ->
        (n, seq_len) ids: B, demos and voids, T, n responses, E."""
        n, L, a = len(counts), self.seq_len, self.alphabet
        is_void, trig = demo_phase(counts, self.config.void_p, self.config.max_voids, rng)
        demo_ids = np.array([ID[t] for t in a.demo])
        W = is_void.shape[1]
        phase = demo_ids[rng.integers(len(demo_ids), size=(n, W))]  # (n, W)
        phase = np.where(is_void, ID["U"], phase)
        phase = np.where(np.arange(W)[None, :] == trig[:, None], ID[a.trig], phase)
        ids = np.full((n, L), PAD, dtype=np.int64)
        ids[:, 0] = ID[a.bos]
        pos = np.arange(L)[None, :]
        t_pos, N = (trig + 1)[:, None], counts[:, None]  # T's position in the sequence
        ids[:, 1:1 + W] = np.where(np.arange(W)[None, :] <= trig[:, None], phase, PAD)
        ids = np.where((pos > t_pos) & (pos <= t_pos + N), ID[a.resp], ids)
        return np.where(pos == t_pos + N + 1, ID[a.eos], ids)

    def _encode_batch(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Well-formed sequences of the given counts, no voids -> (n, seq_len) ids."""
        n, L, a = len(counts), self.seq_len, self.alphabet
        demo_ids = np.array([ID[t] for t in a.demo])
        pick = demo_ids[rng.integers(len(demo_ids), size=(n, L))]  # (n, seq_len)
        pos = np.arange(L)[None, :]
        N = counts[:, None]
        ids = np.full((n, L), PAD, dtype=np.int64)
        ids[:, 0] = ID[a.bos]
        ids = np.where((pos >= 1) & (pos <= N), pick, ids)
        ids = np.where(pos == N + 1, ID[a.trig], ids)
        ids = np.where((pos >= N + 2) & (pos <= 2 * N + 1), ID[a.resp], ids)
        return np.where(pos == 2 * N + 2, ID[a.eos], ids)

    def labels(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Next token at positions T .. last response (t .. t+n for T at t; n+1 .. 2n+1
        without voids), IGNORE elsewhere."""
        ids = np.asarray(ids, dtype=np.int64)  # signed: IGNORE (-1) is written among the ids
        pos = np.arange(ids.shape[1])[None, :]
        N, t_pos = counts[:, None], self.trigger_pos(ids)[:, None]
        nxt = np.concatenate([ids[:, 1:], np.full((len(ids), 1), PAD)], axis=1)
        return np.where((pos >= t_pos) & (pos <= t_pos + N), nxt, IGNORE).astype(np.int64)

    def trigger_pos(self, ids: np.ndarray) -> np.ndarray:
        """(n, pos) ids -> (n,) position of each row's T."""
        return np.argmax(np.asarray(ids) == ID[self.alphabet.trig], axis=1)

    def _strata(self, counts: np.ndarray) -> dict[str, np.ndarray]:
        return {"count": counts.astype(np.int64),
                "variant": np.full(len(counts), VARIANTS.index(self.config.variant), np.int64),
                "held_out": np.isin(counts, self.held_out_counts)}

    def tokens(self, count: int, rng: np.random.Generator) -> list[str]:
        """One sequence of `count` demos as tokens, no voids, demo tokens drawn with `rng`."""
        a = self.alphabet
        demos = [a.demo[int(i)] for i in rng.integers(len(a.demo), size=count)]
        return [a.bos, *demos, a.trig, *([a.resp] * count), a.eos]

    def pad(self, tokens) -> np.ndarray:
        """Tokens -> (seq_len,) int64 ids, right-padded."""
        row = np.full(self.seq_len, PAD, np.int64)
        row[:len(tokens)] = [ID[t] for t in tokens]
        return row


def demo_phase(counts: np.ndarray, void_p: float, max_voids: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Layout of the demonstration phase (after `B`, through `T`) of each row.

    counts (n,) -> (is_void (n, W) bool, trig_pos (n,) int64): is_void marks the voids among
    the first W = max(counts) + 1 + max_voids emissions; the emission at trig_pos is the
    trigger, the real ones before it are the demos, and nothing after it is demo phase."""
    n = len(counts)
    width = int(counts.max()) + 1 + max_voids
    is_void = np.zeros((n, width), bool)
    trig = np.zeros(n, np.int64)
    todo = np.arange(n)
    while todo.size:  # rows with too many voids are drawn again [ours]
        draw = rng.random((todo.size, width)) < void_p  # (m, W)
        real_rank = np.cumsum(~draw, axis=1)  # real emissions up to and including j
        hit = (real_rank == counts[todo, None] + 1) & ~draw  # the trigger's emission
        at = np.argmax(hit, axis=1)  # (m,) its index, when there is one
        ok = hit.any(axis=1) & (at - counts[todo] <= max_voids)  # voids before it
        is_void[todo[ok]] = draw[ok]
        trig[todo[ok]] = at[ok]
        todo = todo[~ok]
    is_void &= np.arange(width)[None, :] < trig[:, None]  # nothing after the trigger
    return is_void, trig
