"""Task `binding`: variable dereferencing in straight-line programs (Wu, Geiger, Millière 2025).

A program is `n_lines` assignments `x=y` (no spaces, one a line) then a query `#q:`; the
target is q's value. Left-hand sides are letters a-z, right-hand sides a digit or a letter
assigned on an earlier line; semantics are sequential Python [paper]. Text of one program:
"k=2\\nj=k\\n...\\nw=j\\n#w:"; tokens are its characters, so 4 * n_lines + 3 = 67 of them.

Generator [ours: the paper gives the grammar and "chain-length-cubed weighting" plus
"rejection sampling" without details]. Per program:
1. depth d ~ d**depth_exponent on 1..max_depth [paper]; query line q uniform on d-1..L-1;
2. the query chain walks back from q: each hop's source line is uniform among the earlier
   lines that leave room for the remaining hops; the earliest holds a digit. This is
   the same "uniform earlier line" law the distractors use, so the chain is not marked out
   by its layout, and deep chains naturally root early: the first-line heuristic works
   for long chains and fails for short ones, as the paper reports of its phase 2;
3. every other line (a distractor) is a digit with probability `p_constant`, else a copy
   of a uniformly chosen earlier line whose depth is below max_depth (so distractor
   chains, which may branch off the query chain, are never deeper than max_depth);
4. reassignment: each line, chain or distractor, reuses with probability `p_reassign`
   the letter of an earlier line whose binding no later line reads (a chain line's binding
   is free once the next hop has read it; the query line's never is), else takes a new
   letter. So the query letter, or a chain letter, may first hold a distractor's value
   (the chain reads the later one), and a chain letter may be overwritten after the chain
   read it (its final value is not the one the answer follows). No line is `x=x`, and
   distractors never copy an overwritten binding, so depth and root_line follow the
   bindings in force at each line. At the default 0.03, 35 % of main programs reassign at
   least once (29 % of gen_lines); in 6 % a letter the chain read ends with another value;
5. shortcut rejection: a program whose answer two or more shallow rules get right (first-
   line constant, last constant, most frequent digit, and nearest constant for depth > 1,
   where it is not the answer by definition) is kept with probability `shortcut_accept`.
   Depth quotas are filled per depth, so rejection leaves the cubic weights exact.

Measured at scale=paper (seed 0): the 500k-program pool takes 14 s of one CPU core, the
generalisation sets 5 s more. Depth shares (train) 0.98 / 7.99 / 26.99 / 64.04 % for depth
1 / 2 / 3 / 4. Test accuracy of each heuristic, overall and at depth 1 / 2 / 3 / 4:
    first_line_constant   0.555   (0.14 / 0.28 / 0.45 / 0.64)   ~ the paper's 56 % plateau
    most_frequent_digit   0.377   (0.26 / 0.30 / 0.35 / 0.40)
    nearest_constant      0.267   (1.00 / 0.39 / 0.27 / 0.24)
    last_constant         0.090   (0.21 / 0.10 / 0.09 / 0.09)
(chance 0.10; the query chain's digit is on line 0 in 51.4 % of test programs). In
`gen_hops` a 10+-hop chain in 16 lines leaves its digit on the first lines almost surely
(first-line rule >= 0.99 there): read deep-hop accuracy against `heuristics("gen_hops")`.

Splits: `train`/`val`/`test` are one pool of unique programs cut in three [paper sizes].
Generalisation sets [paper; sizes ours]: `gen_lines` (gen_min_lines..gen_max_lines lines,
n_gen_per_value each, main depth law), `gen_hops` (n_lines lines, depth 1..gen_max_hops,
n_gen_per_value each) and `gen_heldout_combos`. A variable-value combination is
(query letter, answer digit) [ours]: round(heldout_fraction * 260) of the 260 are held out,
spread over letters and digits (each letter loses one digit at 10 %); programs answering a
held-out combination never appear in any other split, and `gen_heldout_combos` holds only
such programs (main distribution otherwise). Disjointness is exact: main programs need a
row-hash bucket >= 2 (of 32); programs of gen_lines / gen_hops that the main generator
could also make (n_lines lines, depth <= max_depth) need bucket 0 / 1.

Storage: ids uint8, labels int8, each split padded only to its own longest program (67
tokens; gen_lines 103 = seq_len), so the paper-scale train split is 60 MB.
Labels: IGNORE except at the final ":", which holds the answer digit's id. Strata: `depth`,
`root_line` (line of the query chain's digit), `answer_is_first_line_constant`, and
`n_lines` in gen_lines. Counterfactual kinds (aligned, one token differs): `root_value`
(the chain's digit changes: the answer follows), `distractor` (a digit off the chain
changes: the answer stays), `query` (the queried letter becomes another letter with a
different value). Pairs come from programs of the split asked for
(`study/tasks/binding_pairs.py`).

What analyses read (probe variables `root_value`, `line_value`; attention targets `chain`,
`root`, `query_line` from `:`) is in `study/tasks/binding_views.py`, built on `interpret`.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting
from study.tasks.base import IGNORE, Examples, Pairs, Task

LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOCAB = ("PAD", *LETTERS, *"0123456789", "=", "\n", "#", ":")
PAD, LETTER0, DIGIT0, EQ, NL, HASH, COLON = 0, 1, 27, 37, 38, 39, 40
HEURISTICS = ("first_line_constant", "last_constant", "most_frequent_digit", "nearest_constant")
MAIN = ("train", "val", "test")
_BUCKETS, _MAX_ROUNDS = 32, 40


@dataclass(frozen=True)
class BindingConfig:
    seed: int = setting(0, "data seed")
    n_lines: int = setting(16, "[paper] assignments per program")
    max_depth: int = setting(4, "[paper] hops of the query chain in the main distribution")
    depth_exponent: float = setting(3.0, "[paper] P(depth) ~ depth**3")
    n_train: int = setting(450_000, "[paper] 500k unique programs, 90 / 0.2 / 9.8 %")
    n_val: int = setting(1_000, "validation programs [paper]")
    n_test: int = setting(49_000, "test programs [paper]")
    p_constant: float = setting(
        0.5,
        "[ours] a distractor line assigns a digit with this probability")
    p_reassign: float = setting(
        0.03,
        "[ours] a line reuses an earlier line's letter with this prob.")
    shortcut_accept: float = setting(0.75, "[ours] keep-probability of shortcut-prone programs")
    heldout_fraction: float = setting(
        0.1,
        "[paper] of the 26 x 10 (query letter, answer) combinations")
    gen_min_lines: int = setting(2, "[paper] programs of 2-25 lines")
    gen_max_lines: int = setting(25, "longest program of the line-count generalisation set [paper]")
    gen_max_hops: int = setting(13, "[paper] 1-13 hops")
    n_gen_per_value: int = setting(1_000, "[ours] programs per line count / per hop count")
    n_gen_heldout: int = setting(
        5_000, "programs of the held-out (query letter, answer) set [ours]")

    def __post_init__(self):
        def bad(key, allowed):
            raise UsageError(f"task.{key}={getattr(self, key)!r} must be {allowed}")
        if self.seed < 0:
            bad("seed", "non-negative")
        if not 2 <= self.n_lines <= 26:
            bad("n_lines", "in 2..26")
        if not 1 <= self.max_depth <= self.n_lines:
            bad("max_depth", f"in 1..task.n_lines ({self.n_lines})")
        if not (math.isfinite(self.depth_exponent) and self.depth_exponent >= 0):
            bad("depth_exponent", "a finite number >= 0")
        for key in ("n_train", "n_val", "n_test", "n_gen_per_value", "n_gen_heldout"):
            if getattr(self, key) < 1:
                bad(key, "at least 1")
        for key in ("p_constant", "shortcut_accept"):
            if not 0 < getattr(self, key) <= 1:
                bad(key, "in (0, 1]")
        if not 0 <= self.p_reassign <= 1:
            bad("p_reassign", "in [0, 1]")
        if not 0 <= self.heldout_fraction <= 0.5:
            bad("heldout_fraction", "in [0, 0.5]")
        if not 2 <= self.gen_min_lines <= 26:
            bad("gen_min_lines", "in 2..26")
        if not self.gen_min_lines <= self.gen_max_lines <= 26:
            bad("gen_max_lines", f"in task.gen_min_lines ({self.gen_min_lines})..26")
        if not 1 <= self.gen_max_hops <= self.n_lines:
            bad("gen_max_hops", f"in 1..task.n_lines ({self.n_lines})")


# --- programs as token arrays --------------------------------------------------------------
def interpret(ids: np.ndarray) -> dict[str, np.ndarray]:
    """Run programs (n, S) with sequential semantics. Per program: `n_lines`, `query`
    (letter index), `answer`, `depth`, `root_line`, `query_line` (its last assignment);
    per line (n, L): `is_const`, `digit` (-1 for copies), `line_value` (the value its
    left-hand letter holds right after it), `source_line` (the line whose binding a copy
    reads, -1 for digits); per letter (n, 26): `value` (-1 if never assigned). Lines past a
    program's end hold -1 / False. `ids` may be any integer dtype (splits are uint8)."""
    ids = np.asarray(ids)
    n = len(ids)
    rows = np.arange(n)
    L = (ids == NL).sum(1)
    Lmax = int(L.max()) if n else 0
    val = np.full((n, 26), -1, np.int8)
    dep = np.zeros((n, 26), np.int8)
    root = np.full((n, 26), -1, np.int8)
    line = np.full((n, 26), -1, np.int8)
    is_const = np.zeros((n, Lmax), bool)
    digit = np.full((n, Lmax), -1, np.int8)
    line_value = np.full((n, Lmax), -1, np.int64)
    source_line = np.full((n, Lmax), -1, np.int64)
    for k in range(Lmax):
        on = k < L
        # token ids become numbers here: signed first, since uint8 arithmetic wraps
        # (PAD - LETTER0 = 255) and a uint8 array beside -1 in np.where raises on numpy >= 2.5;
        # a column at a time, not a 64-bit copy of a 500k-program split
        lhs = ids[:, 4 * k].astype(np.int64) - LETTER0
        rhs = ids[:, 4 * k + 2].astype(np.int64)
        c = (rhs >= DIGIT0) & (rhs < DIGIT0 + 10)
        r = np.clip(rhs - LETTER0, 0, 25)
        v = np.where(c, rhs - DIGIT0, val[rows, r])
        d = np.where(c, 1, dep[rows, r] + 1)
        rt = np.where(c, k, root[rows, r])
        line_value[:, k] = np.where(on, v, -1)
        source_line[:, k] = np.where(on & ~c, line[rows, r], -1)
        a, l = rows[on], lhs[on]
        val[a, l], dep[a, l], root[a, l], line[a, l] = v[on], d[on], rt[on], k
        is_const[:, k] = c & on
        digit[:, k] = np.where(c & on, rhs - DIGIT0, -1)
    q = ids[rows, 4 * L + 1].astype(np.int64) - LETTER0
    return {"n_lines": L.astype(np.int64), "query": q, "answer": val[rows, q].astype(np.int64),
            "depth": dep[rows, q].astype(np.int64), "root_line": root[rows, q].astype(np.int64),
            "query_line": line[rows, q].astype(np.int64), "is_const": is_const,
            "digit": digit.astype(np.int64), "value": val.astype(np.int64),
            "line_value": line_value, "source_line": source_line}


def heuristic_predictions(p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each shallow rule's predicted digit (n,) for interpreted programs `p`."""
    is_const, digit = p["is_const"], p["digit"]
    n, Lmax = is_const.shape
    rows, k = np.arange(n), np.arange(Lmax)[None, :]
    last = np.where(is_const, k, -1).max(1)
    near = np.where(is_const & (k <= p["query_line"][:, None]), k, -1).max(1)
    count = np.zeros((n, 10), np.int64)
    first_seen = np.full((n, 10), Lmax, np.int64)
    for j in range(Lmax - 1, -1, -1):
        m = is_const[:, j]
        count[rows[m], digit[m, j]] += 1
        first_seen[rows[m], digit[m, j]] = j
    # most frequent digit; ties go to the digit seen first
    most = np.argmax(count * (Lmax + 1) - first_seen, 1)
    return {"first_line_constant": digit[:, 0], "last_constant": digit[rows, last],
            "most_frequent_digit": most, "nearest_constant": digit[rows, near]}


def _candidates(rng: np.random.Generator, L: np.ndarray, d: np.ndarray, p_constant: float,
                p_reassign: float, cap: int, width: int) -> np.ndarray:
    """Random programs with L[i] lines whose query chain has d[i] hops -> (n, width) uint8."""
    n, Lmax, Dmax = len(L), int(L.max()), int(d.max())
    rows = np.arange(n)
    chain = np.zeros((n, Dmax + 1), np.int64)  # line of hop k (0 = the root digit)
    chain[rows, d - 1] = d - 1 + (rng.random(n) * (L - d + 1)).astype(np.int64)
    for k in range(Dmax - 2, -1, -1):  # walk back: uniform among lines leaving room
        nxt = chain[:, k + 1]
        pos = k + (rng.random(n) * (nxt - k)).astype(np.int64)
        chain[:, k] = np.where(k < d - 1, pos, chain[:, k])
    chain[rows, d] = Lmax  # the query reads the last line's binding at the end
    parent = np.full((n, Lmax), -2, np.int64)  # -2 distractor, -1 chain root, else source line
    reader = np.full((n, Lmax), -1, np.int64)  # line of the chain hop reading this line
    for k in range(Dmax):
        on = k < d
        parent[rows[on], chain[on, k]] = chain[on, k - 1] if k else -1
        reader[rows[on], chain[on, k]] = chain[on, k + 1]
    depth = np.zeros((n, Lmax), np.int8)
    ref = np.zeros((n, Lmax), np.int64)
    const = np.zeros((n, Lmax), bool)
    live = np.ones((n, Lmax), bool)  # line's binding not yet overwritten
    fresh = np.argsort(rng.random((n, 26)), 1)  # letters in order of first use
    letter = np.zeros((n, Lmax), np.int64)
    n_fresh = np.zeros(n, np.int64)
    for i in range(Lmax):
        in_chain = parent[:, i] != -2
        want_const = rng.random(n) < p_constant
        if i:
            ok = (depth[:, :i] < cap) & live[:, :i]  # (n, i)
            pick = np.argmax(np.where(ok, rng.random((n, i), np.float32), -1), 1)
            want_const |= ~ok.any(1)
        else:
            pick, want_const[:] = np.zeros(n, np.int64), True
        const[:, i] = np.where(in_chain, parent[:, i] == -1, want_const)
        ref[:, i] = np.where(in_chain, parent[:, i], pick)
        depth[:, i] = np.where(const[:, i], 1, depth[rows, ref[:, i]] + 1)
        # reassignment: overwrite a live binding that no later chain line reads (not the
        # one this line copies, so no `x=x`); later distractors then cannot copy it
        again = np.zeros(n, bool)
        if i and p_reassign > 0:
            sub = np.flatnonzero(rng.random(n) < p_reassign)
            k = np.arange(i)[None, :]
            free = (live[sub, :i] & (reader[sub, :i] < i)
                    & ((k != ref[sub, i, None]) | const[sub, i, None]))
            has = free.any(1)
            sub, free = sub[has], free[has]
            old = np.argmax(np.where(free, rng.random(free.shape, np.float32), -1), 1)
            letter[sub, i] = letter[sub, old]
            live[sub, old] = False
            again[sub] = True
        new = rows[~again]
        letter[new, i] = fresh[new, n_fresh[new]]
        n_fresh[new] += 1
    digits = rng.integers(0, 10, (n, Lmax))
    lines = np.empty((n, Lmax, 4), np.uint8)
    lines[:, :, 0] = LETTER0 + letter
    lines[:, :, 1] = EQ
    lines[:, :, 2] = np.where(const, DIGIT0 + digits,
                              LETTER0 + np.take_along_axis(letter, ref, 1))
    lines[:, :, 3] = NL
    out = np.full((n, width), PAD, np.uint8)
    flat = lines.reshape(n, 4 * Lmax)
    out[:, :4 * Lmax] = np.where(np.arange(4 * Lmax)[None] < 4 * L[:, None], flat, PAD)
    out[rows, 4 * L] = HASH
    out[rows, 4 * L + 1] = LETTER0 + letter[rows, chain[rows, d - 1]]
    out[rows, 4 * L + 2] = COLON
    return out


_M32 = np.uint64(0xFFFFFFFF)


def _times(hi: np.ndarray, lo: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """32-bit halves of h * c mod 2**64, h given by its halves (uint64 arrays below 2**32).
    Each product is of two 32-bit numbers, so below 2**64: nothing wraps around."""
    c_hi, c_lo = np.uint64(c >> 32), np.uint64(c & 0xFFFFFFFF)
    low = lo * c_lo
    hi = ((hi * c_lo & _M32) + (lo * c_hi & _M32) + (low >> np.uint64(32))) & _M32
    return hi, low & _M32


def _bucket(tokens: np.ndarray) -> np.ndarray:
    """A fixed hash of each row's tokens (FNV-1a, then a 64-bit finaliser) mod 32 -> (n,).
    The hash is arithmetic modulo 2**64, done here on 32-bit halves (`_times`) so that no
    step relies on integer overflow wrapping."""
    hi = np.full(len(tokens), 0xCBF29CE4, np.uint64)  # h = 0xCBF29CE484222325
    lo = np.full(len(tokens), 0x84222325, np.uint64)
    for j in range(tokens.shape[1]):  # padding is skipped: a row's bucket ignores its width
        t = tokens[:, j].astype(np.uint64)
        step = _times(hi, lo ^ t, 0x100000001B3)  # h = (h ^ t) * prime; t is in the low half
        hi, lo = np.where(t != PAD, step[0], hi), np.where(t != PAD, step[1], lo)
    lo ^= hi >> np.uint64(1)  # h ^= h >> 33: h >> 33 is hi >> 1, below 2**31
    hi, lo = _times(hi, lo, 0xFF51AFD7ED558CCD)
    lo ^= hi >> np.uint64(1)
    return (lo % np.uint64(_BUCKETS)).astype(np.int64)  # 2**32 is a multiple of 32


def _first_unique(tokens: np.ndarray) -> np.ndarray:
    """Sorted indices of the first occurrence of each distinct row."""
    rows = np.ascontiguousarray(tokens).view(np.dtype((np.void, tokens.shape[1]))).ravel()
    return np.sort(np.unique(rows, return_index=True)[1])


def _code(text: str) -> int:
    return zlib.crc32(text.encode())


_PAPER_TRAIN = dict(steps=105_400, batch_size=64, lr=1e-4, weight_decay=1e-4,  # [paper]
                    betas=(0.95, 0.999), warmup_steps=750, schedule="linear",
                    grad_clip=0.0)  # [paper] no gradient clipping is reported


@register("task", "binding", config=BindingConfig, presets={
    "paper": {},
    "small": {"n_train": 40_000, "n_val": 1_000, "n_test": 2_000, "n_gen_per_value": 100,
              "n_gen_heldout": 1_000},
    "smoke": {"n_train": 2_000, "n_val": 200, "n_test": 500, "n_gen_per_value": 20,
              "n_gen_heldout": 200},
})
class BindingTask(Task):
    """Dereference a queried variable through chains of assignments (Wu et al. 2025)."""

    name = "binding"
    version = 2
    eval_splits: ClassVar[tuple[str, ...]] = ("val", "test")
    causal_variables: ClassVar[tuple[str, ...]] = ("root_value",)
    probe_variable_names: ClassVar[tuple[str, ...]] = ("root_value", "line_value")
    counterfactual_kinds: ClassVar[tuple[str, ...]] = ("root_value", "distractor", "query")
    train_presets: ClassVar[dict] = {
        "paper": _PAPER_TRAIN,
        # [ours] a tiny model on a 2-core CPU in minutes
        "small": dict(steps=1_500, batch_size=64, lr=1e-3, weight_decay=1e-4,
                      betas=(0.9, 0.999), warmup_steps=100, schedule="linear"),
        "smoke": dict(steps=20, batch_size=16, lr=1e-3, warmup_steps=2, eval_examples=100),
    }

    def __init__(self, config: BindingConfig):
        super().__init__(config)
        self._pool: np.ndarray | None = None
        self.heldout = self._heldout_table()  # (26, 10) bool: (query letter, answer digit)

    # --- vocabulary -------------------------------------------------------------------
    @property
    def vocab(self) -> tuple[str, ...]:
        return VOCAB

    @property
    def seq_len(self) -> int:
        return 4 * max(self.config.n_lines, self.config.gen_max_lines) + 3

    def render(self, ids: np.ndarray) -> str:
        return "".join(VOCAB[i] for i in np.asarray(ids).tolist() if i != PAD)

    def label_of(self, labels: np.ndarray) -> int:
        return int(np.asarray(labels)[np.asarray(labels) != IGNORE][0]) - DIGIT0

    # --- data -------------------------------------------------------------------------
    @property
    def splits(self) -> tuple[str, ...]:
        extra = ("gen_heldout_combos",) if self.heldout.any() else ()
        return MAIN + ("gen_lines", "gen_hops") + extra

    def generate(self, split: str) -> Examples:
        c = self.config
        if split in MAIN:
            if self._pool is None:  # one pool of unique programs, cut in three
                total = c.n_train + c.n_val + c.n_test
                cells = self._depth_cells(c.n_lines, total, self._rng("main"))
                self._pool = self._fill("main", cells, "n_train")
            lo = {"train": 0, "val": c.n_train, "test": c.n_train + c.n_val}[split]
            hi = lo + {"train": c.n_train, "val": c.n_val, "test": c.n_test}[split]
            return self._examples(self._pool[lo:hi])
        rng = self._rng(split)
        if split == "gen_lines":
            cells = np.concatenate([self._depth_cells(L, c.n_gen_per_value, rng)
                                    for L in range(c.gen_min_lines, c.gen_max_lines + 1)])
            return self._examples(self._fill("gen_lines", cells, "n_gen_per_value"), True)
        if split == "gen_hops":
            cells = np.array([(c.n_lines, d, c.n_gen_per_value)
                              for d in range(1, c.gen_max_hops + 1)], np.int64)
            return self._examples(self._fill("gen_hops", cells, "n_gen_per_value"))
        cells = self._depth_cells(c.n_lines, c.n_gen_heldout, rng)
        return self._examples(self._fill("gen_heldout_combos", cells, "n_gen_heldout"))

    def _rng(self, *tags) -> np.random.Generator:
        return np.random.default_rng([self.config.seed, *(_code(str(t)) for t in tags)])

    def _heldout_table(self) -> np.ndarray:
        """round(fraction * 260) combinations, letters and digits as even as possible."""
        k = round(self.config.heldout_fraction * 260)
        rng = self._rng("heldout")
        letters, digits = rng.permutation(26), rng.permutation(10)
        j = np.arange(k)
        table = np.zeros((26, 10), bool)
        # combination j: letter j mod 26, digit (j + j // 26) mod 10 -- distinct for j < 260
        table[letters[j % 26], digits[(j + j // 26) % 10]] = True
        return table

    def _depth_cells(self, L: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """(cells, 3) rows of (lines, depth, quota): depth ~ depth**exponent, multinomial."""
        depths = np.arange(1, min(self.config.max_depth, L) + 1)
        w = depths.astype(float) ** self.config.depth_exponent
        quota = rng.multinomial(n, w / w.sum())
        return np.stack([np.full(len(depths), L), depths, quota], 1).astype(np.int64)

    def _fill(self, split: str, cells: np.ndarray, key: str) -> np.ndarray:
        """Unique accepted programs filling each (lines, depth) cell's quota, shuffled ->
        (n, width) uint8, as wide as the longest cell. Candidates are drawn in rounds sized by
        each cell's acceptance."""
        c = self.config
        rng = self._rng(split, "fill")
        quota, width = cells[:, 2], 4 * int(cells[:, 0].max()) + 3
        kept = np.zeros((0, width), np.uint8)
        kept_cell = np.zeros(0, np.int64)
        # first guess at each cell's acceptance; later rounds use the measured one
        rate = np.full(len(cells), 0.7)
        if split == "gen_heldout_combos":
            rate *= self.heldout.mean()
        elif split != "main":
            rate[(cells[:, 0] == c.n_lines) & (cells[:, 1] <= c.max_depth)] /= _BUCKETS
        for _ in range(_MAX_ROUNDS):
            short = quota - np.bincount(kept_cell, minlength=len(cells))
            if not short.any():
                break
            want = np.where(short > 0, np.ceil(short / rate * 1.1).astype(np.int64) + 8, 0)
            cell = rng.permutation(np.repeat(np.arange(len(cells)), want))
            toks = _candidates(rng, cells[cell, 0], cells[cell, 1], c.p_constant, c.p_reassign,
                               c.max_depth, width)
            ok = self._accept(split, toks, cells[cell, 0], cells[cell, 1], rng)
            got = np.bincount(cell[ok], minlength=len(cells))
            rate = np.where(want > 0, np.maximum(got / np.maximum(want, 1), 0.005), rate)
            toks = np.concatenate([kept, toks[ok]])
            cid = np.concatenate([kept_cell, cell[ok]])
            first = _first_unique(toks)
            toks, cid = toks[first], cid[first]
            order = np.argsort(cid, kind="stable")
            rank = np.empty(len(cid), np.int64)
            starts = np.searchsorted(cid[order], np.arange(len(cells)))
            rank[order] = np.arange(len(cid)) - starts[cid[order]]
            keep = rank < quota[cid]
            kept, kept_cell = toks[keep], cid[keep]
        else:
            raise UsageError(f"task.{key}={getattr(c, key)}: could make only {len(kept)} of "
                             f"{quota.sum()} distinct {split} programs; ask for fewer or "
                             f"raise task.n_lines")
        return kept[rng.permutation(len(kept))]

    def _accept(self, split, toks, L, d, rng) -> np.ndarray:
        """Shortcut rejection, held-out combinations and hash buckets -> (n,) bool."""
        c = self.config
        p = interpret(toks)
        if not ((p["depth"] == d).all() and (p["n_lines"] == L).all()):
            raise RuntimeError("binding generator produced a program of the wrong shape")
        right = {h: pred == p["answer"] for h, pred in heuristic_predictions(p).items()}
        right["nearest_constant"] &= d > 1
        shortcuts = sum(right.values())
        ok = (shortcuts < 2) | (rng.random(len(toks)) < c.shortcut_accept)
        held = self.heldout[p["query"], p["answer"]]
        if split == "gen_heldout_combos":
            return ok & held
        bucket = _bucket(toks)
        if split == "main":
            return ok & ~held & (bucket >= 2)
        in_main = (L == c.n_lines) & (d <= c.max_depth)
        return ok & ~held & (~in_main | (bucket == ("gen_lines", "gen_hops").index(split)))

    def _examples(self, toks: np.ndarray, with_lines: bool = False) -> Examples:
        p = interpret(toks)
        ids = toks  # uint8: a 500k-program split is 34 MB, not 270
        strata = {"depth": p["depth"], "root_line": p["root_line"],
                  "answer_is_first_line_constant": p["answer"] == p["digit"][:, 0]}
        if with_lines:
            strata["n_lines"] = p["n_lines"]
        return Examples(ids, self._labels(ids, p), strata)

    @staticmethod
    def _labels(ids: np.ndarray, p: dict) -> np.ndarray:
        labels = np.full(ids.shape, IGNORE, np.int8)
        labels[np.arange(len(ids)), 4 * p["n_lines"] + 2] = DIGIT0 + p["answer"]
        return labels

    def heuristics(self, split: str = "test") -> list[dict]:
        """Shallow rules, overall, per depth (and per n_lines in gen_lines): the digit on
        line 0; the last digit assigned; the most frequent digit (ties: seen first); the
        digit nearest at or before the query's own assignment line."""
        ex = self.split(split)
        p = interpret(ex.ids)
        out = []
        for name, pred in heuristic_predictions(p).items():
            right = pred == p["answer"]
            out.append({"heuristic": name, "stratum": "all", "value": "all",
                        "accuracy": float(right.mean()), "n": len(right)})
            for stratum in ("depth", "n_lines"):
                if stratum not in ex.strata:
                    continue
                for v in np.unique(ex.strata[stratum]):
                    m = ex.strata[stratum] == v
                    out.append({"heuristic": name, "stratum": stratum, "value": int(v),
                                "accuracy": float(right[m].mean()), "n": int(m.sum())})
        return out

    # --- analysis views (study/tasks/binding_views.py) ------------------------------------------
    def probe_variables(self, ids: np.ndarray, labels=None) -> dict[str, np.ndarray]:
        from study.tasks.binding_views import probe_variables
        return probe_variables(np.asarray(ids), self.pad_id)

    def attention_targets(self, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        from study.tasks.binding_views import attention_targets
        return attention_targets(np.asarray(ids))

    # --- counterfactual pairs (study/tasks/binding_pairs.py) -----------------------------------
    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        from study.tasks.binding_pairs import counterfactuals
        return counterfactuals(self, kind, n, split, seed)
