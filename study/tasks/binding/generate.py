"""The generator of binding programs and their splits (Wu, Geiger, Millière 2025).

[ours: the paper gives the grammar and "chain-length-cubed weighting" plus "rejection
sampling" without details]. Per program:
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
   where it is not the answer by definition; `causal.heuristic_predictions`) is kept with
   probability `shortcut_accept`. Depth quotas are filled per depth, so rejection leaves
   the cubic weights exact.

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

Splits (what each holds is in the package docstring): `train`/`val`/`test` are one pool of
unique programs cut in three. Disjointness is exact: main programs need a row-hash bucket
(`bucket`) >= 2 (of 32); programs of gen_lines / gen_hops that the main generator could also
make (n_lines lines, depth <= max_depth) need bucket 0 / 1; programs answering a held-out
(query letter, answer digit) combination (`Generator.heldout`) go to `gen_heldout_combos`
only. Storage: ids uint8, labels int8, each split padded only to its own longest program.
"""
from __future__ import annotations

import zlib

import numpy as np

from study.core.errors import UsageError
from study.tasks.base import IGNORE, Examples
from study.tasks.binding.causal import heuristic_predictions, interpret
from study.tasks.binding.vocab import COLON, DIGIT0, EQ, HASH, LETTER0, NL, PAD

MAIN = ("train", "val", "test")
_BUCKETS, _MAX_ROUNDS = 32, 40


class Generator:
    """The splits of one binding config (a `BindingConfig`), each a pure function of it.
    `heldout` is the (26, 10) bool table of held-out (query letter, answer digit)
    combinations; `rng(*tags)` the random stream of a purpose (a split, the pairs of a kind)."""

    def __init__(self, config):
        self.config = config
        self._pool: np.ndarray | None = None
        self.heldout = self._heldout_table()  # (26, 10) bool: (query letter, answer digit)

    @property
    def splits(self) -> tuple[str, ...]:
        extra = ("gen_heldout_combos",) if self.heldout.any() else ()
        return MAIN + ("gen_lines", "gen_hops") + extra

    def generate(self, split: str) -> Examples:
        """Build a whole split (the three main splits share one pool, built once)."""
        c = self.config
        if split in MAIN:
            if self._pool is None:  # one pool of unique programs, cut in three
                total = c.n_train + c.n_val + c.n_test
                cells = self._depth_cells(c.n_lines, total, self.rng("main"))
                self._pool = self._fill("main", cells, "n_train")
            lo = {"train": 0, "val": c.n_train, "test": c.n_train + c.n_val}[split]
            hi = lo + {"train": c.n_train, "val": c.n_val, "test": c.n_test}[split]
            return self._examples(self._pool[lo:hi])
        rng = self.rng(split)
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

    def rng(self, *tags) -> np.random.Generator:
        """The random stream of a purpose named by `tags`, seeded by the data seed."""
        return np.random.default_rng([self.config.seed, *(_code(str(t)) for t in tags)])

    def _heldout_table(self) -> np.ndarray:
        """round(fraction * n_letters * 10) combinations of the letters in use, letters and
        digits as even as possible (rows of unused letters stay False)."""
        m = self.config.n_letters
        k = round(self.config.heldout_fraction * m * 10)
        rng = self.rng("heldout")
        letters, digits = rng.permutation(m), rng.permutation(10)
        j = np.arange(k)
        table = np.zeros((26, 10), bool)
        # combination j: letter j mod m, digit (j mod m + 7 (j // m)) mod 10 -- distinct for
        # j < 10 m, as 7 is prime to 10
        table[letters[j % m], digits[(j % m + 7 * (j // m)) % 10]] = True
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
        rng = self.rng(split, "fill")
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
                               c.max_depth, width, c.n_letters)
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
        b = bucket(toks)
        if split == "main":
            return ok & ~held & (b >= 2)
        in_main = (L == c.n_lines) & (d <= c.max_depth)
        return ok & ~held & (~in_main | (b == ("gen_lines", "gen_hops").index(split)))

    def _examples(self, toks: np.ndarray, with_lines: bool = False) -> Examples:
        p = interpret(toks)
        ids = toks  # uint8: a 500k-program split is 34 MB, not 270
        strata = {"depth": p["depth"], "root_line": p["root_line"],
                  "answer_is_first_line_constant": p["answer"] == p["digit"][:, 0]}
        if with_lines:
            strata["n_lines"] = p["n_lines"]
        return Examples(ids, labels(ids, p), strata)


def _candidates(rng: np.random.Generator, L: np.ndarray, d: np.ndarray, p_constant: float,
                p_reassign: float, cap: int, width: int, letters: int = 26) -> np.ndarray:
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
    fresh = np.argsort(rng.random((n, letters)), 1)  # letters in order of first use
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


def bucket(tokens: np.ndarray) -> np.ndarray:
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


def labels(ids: np.ndarray, p: dict) -> np.ndarray:
    """(n, width) int8 labels of programs `ids` interpreted as `p`: IGNORE except at the
    final `:`, which holds the answer digit's id."""
    out = np.full(ids.shape, IGNORE, np.int8)
    out[np.arange(len(ids)), 4 * p["n_lines"] + 2] = DIGIT0 + p["answer"]
    return out
