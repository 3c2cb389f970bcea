"""Counterfactual (base, source) pairs of the counting task (Grant, Goodman, McClelland 2025).

Kind "<model>:<variable>" or "<model>:full" (every variable of that model, the authors'
default "full" swap), the models being the programs of `causal`; and "<model>:<variable>_next"
(`ctx_distr:count_next`) [ours]: the same intervention, scored at the intervened position
only, i.e. on the one prediction made there (see `NEXT`). Base and source sequences
are drawn afresh, without voids, with counts 1-20, held-out counts included, for every split
but `heldout` (held-out counts only) [authors: `grantsrb/mas/main.py` builds the DAS data
with `hold_outs=[]` and `unk_p=0`]; `task.cf_counts=trained` restricts them to the trained
counts (`pair_counts`). A position is drawn uniformly in each among the demo and response
tokens (not B, T, E or PAD) [paper: `filters.default_filter`].
The causal model's variables after the source token replace the base's after its token;
the model then generates the rest (`CausalModel.intervene`). `base_ids` is that
*counterfactual* sequence: the base up to `base_pos`, then the continuation the intervened
model sees if it emits the counterfactual outputs (the paper feeds models their own outputs).
`cf_labels` are the program's next tokens at positions >= base_pos in its response phase;
`base_labels` are what the unintervened program predicts on the same inputs at the same
positions (IGNORE where that is "some demo token" of several). Pairs whose counterfactual
sequence exceeds seq_len, or that leave nothing scored (an Up-Up swap making the responses
outnumber the demos ends in an unscored `E`), are redrawn [ours]. `source_labels` are the
source's own (its responses and `E`, as the task labels it). Pair strata: `count`,
`source_count`, `base_phase`, `source_phase` (0 demo / 1 response at the chosen token) and
`value` (the source's value of the first swapped variable); `Pairs.changed` marks pairs whose
cf_labels differ from base_labels.
"""
from __future__ import annotations

import zlib

import numpy as np

from study.core.errors import UsageError
from study.tasks.base import IGNORE, Pairs
from study.tasks.counting.causal import DEMO, parse_kind
from study.tasks.counting.generate import SPLIT_CODE
from study.tasks.counting.vocab import ID

CF_COUNTS = ("all", "trained")  # the choices of `task.cf_counts`
# [ours] the suffix of a kind scored on the next prediction only: the prediction at base_pos,
# the one a ctx_distr count lives for (`causal.CtxDistr`). A network that recomputes the
# count from the context at every position (Grant et al.'s anti-Markovian solution) has an
# interchanged count at one position change that one prediction; scoring every later
# response as well asks a transformer's later positions, which read the intervened position
# through attention, to ignore it. Pairs are drawn in the response phase, where that
# prediction is scored.
NEXT = "_next"


def pair_counts(gen, split: str) -> np.ndarray:
    """The counts counterfactual pairs of a split draw from (`gen`: the task's `Generator`):
    `heldout` the held-out counts; the others every count (`cf_counts=all`, the authors' DAS
    data) or the trained counts (`cf_counts=trained`)."""
    c = gen.config
    if split == "heldout" or c.cf_counts == "trained":
        return gen.counts_of(split)
    return np.arange(c.min_count, c.max_count + 1, dtype=np.int64)


def counterfactuals(task, kind: str, n: int, split: str = "test", seed: int = 0,
                    role: str | None = None) -> Pairs:
    """n pairs of `kind` ("<model>:<variable>" or "<model>:full") for `split` of a
    `CountingTask`, a pure function of (config, kind, n, split, seed, role). `role` (a token
    role of `layout`, e.g. `demo@2`, `trigger`, `response@1`): every pair intervened at
    that role in the base (bases drawn until they hold it), with the source's state at a
    position drawn as always, so that its label is the one of that intervention [ours: the
    atlas's cells; a pair's label depends on where it is intervened, and a source read at
    the same demonstration step would carry the same count]; fewer than n where few draws
    can hold the role (a `_next` kind at a demonstration step: none)."""
    next_only = kind.endswith(NEXT)
    try:
        if kind not in task.counterfactual_kinds:
            raise ValueError(kind)
        model_name, variables = parse_kind(kind[:-len(NEXT)] if next_only else kind)
    except ValueError:
        raise UsageError(f"kind={kind!r} is not a counterfactual kind of counting; choose "
                         f"from {', '.join(task.counterfactual_kinds)}") from None
    if split not in task.splits:
        raise UsageError(f"split={split!r} is not a split of task counting; choose from "
                         f"{', '.join(task.splits)}")
    gen = task.generator
    model, L = task.causal_model(model_name), gen.seq_len
    where = _role_position(role) if role is not None else None
    rng = gen.rng(SPLIT_CODE[split], zlib.crc32(kind.encode()), seed, 3,
                  *(() if role is None else (zlib.crc32(role.encode()),)))
    counts, rows, tries = pair_counts(gen, split), [], 0
    while len(rows) < n:
        tries += 1
        if tries > 100 * n + 1000:  # under 15 % are redrawn at the defaults
            if role is not None:
                break  # a role few draws hold: the pairs there are
            raise RuntimeError(f"counting: too few {kind} pairs fit in seq_len {L}")
        row = _pair(gen, model, variables, counts, rng, next_only, where)
        if row is not None:
            rows.append(row)
    if not rows:
        empty = np.zeros((0, L), np.int64)
        none = np.zeros(0, np.int64)
        names = ("count", "source_count", "base_phase", "source_phase", "value")
        return Pairs(kind, empty, empty.copy(), empty.copy(), empty.copy(), none, none.copy(),
                     {k: none.copy() for k in names}, empty.copy())
    cols = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    base_ids, source_ids, base_labels, cf_labels, base_pos, source_pos, source_labels = cols[:7]
    names = ("count", "source_count", "base_phase", "source_phase", "value")
    strata = dict(zip(names, cols[7:]))
    return Pairs(kind, base_ids, source_ids, base_labels, cf_labels, base_pos, source_pos,
                 strata, source_labels)


def _pair(gen, model, variables, counts: np.ndarray, rng, next_only: bool = False,
          where=None):
    """One pair as a tuple of rows, or None when the counterfactual sequence is too long or
    leaves nothing scored (`next_only`: the prediction at base_pos is the one scored), or
    (`where`: a role's position in a sequence of a count, `_role_position`, where the base is
    intervened) where the base lacks the role."""
    L, a = gen.seq_len, gen.alphabet
    nb, ns = (int(x) for x in rng.choice(counts, size=2))
    base, source = (gen.tokens(k, rng) for k in (nb, ns))
    bpos, spos = _position(nb, rng), _position(ns, rng)
    if where is not None:  # the base at the role; the source read anywhere, as always
        bpos = where(nb)
        if bpos is None:
            return None
    cf, nxt, scored = model.intervene(base, bpos, source, spos, variables, rng)
    if len(cf) > L or not any(scored[bpos:]) or (next_only and not scored[bpos]):
        return None  # [ours] too long, or nothing left to score (Up-Up's unscored E)
    _, plain = model.run(cf, obj_count=nb)  # unintervened predictions on the same inputs
    cf_lab = np.full(L, IGNORE, np.int64)
    base_lab = np.full(L, IGNORE, np.int64)
    for t in range(bpos, bpos + 1 if next_only else len(cf)):
        if scored[t]:
            cf_lab[t] = ID[nxt[t]]
            p = plain[t]
            if p == DEMO and len(a.demo) == 1:
                p = a.demo[0]
            base_lab[t] = IGNORE if p == DEMO else ID[p]
    value = model.run(source)[0][spos][variables[0]]
    own = np.full(L, IGNORE, np.int64)  # the source's own labels: its responses and E
    own[ns + 1:2 * ns + 2] = [ID[t] for t in source[ns + 2:2 * ns + 3]]
    return (gen.pad(cf), gen.pad(source), base_lab, cf_lab, bpos, spos, own,
            nb, ns, int(bpos > nb), int(spos > ns), value)


def _role_position(role: str):
    """count -> the position of `role` in a sequence of that count (None where it has none):
    `demo@i` at i (i <= count), `trigger` at count + 1, `response@j` at count + 1 + j
    (j <= count), as `layout.token_roles` places them."""
    name, _, i = role.partition("@")
    if name == "trigger" and not i:
        return lambda n: n + 1
    if name in ("demo", "response") and i.isdigit() and int(i) >= 1:
        j = int(i)
        return (lambda n: j if j <= n else None) if name == "demo" else \
            (lambda n: n + 1 + j if j <= n else None)
    raise UsageError(f"role {role!r} is not a counting role (demo@I, trigger, response@J)")


def _position(count: int, rng) -> int:
    """Uniform over demo positions 1..n and response positions n+2..2n+1."""
    k = int(rng.integers(2 * count))
    return 1 + k if k < count else 2 + k
