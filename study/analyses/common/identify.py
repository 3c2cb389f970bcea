"""Can a pair set tell a causal variable apart from the input at the site, or from the answer?
[ours]

An interchange at a site succeeds on a pair when the network then gives the pair's
counterfactual label. Two networks that compute nothing of the variable can still succeed:

- an **input copy**, which holds only the last `window` tokens read up to the site: written
  with the source's, it outputs what the task gives for the base with those tokens pasted in;
- an **answer code**, which holds only the answer about to be read out: written with the
  source's, it outputs the source's own answer, read at the same offsets from the site. A
  site before the base's first scored position holds no answer yet (nothing of it is
  decided), so there the answer code predicts nothing.

`confounds` runs both through the task's own labels (`Task.labels_of`) on each pair and gives
the share of the pairs on which each would give the counterfactual label: the IIA a planted
network holding only that would score. Where a share is high the pairs cannot separate the
variable from it (binding's one-token pairs at `:`, whose label is the source's answer; the
query letter one token before `:`), and no verdict may call the result "computation":
`study.claims.rules` reads these shares as controls that a variable's interchange must clear,
and calls a result confounded where none could clear them.

The shares depend on the pairs, the positions they are read at and which of them are tested,
never on the site: `ConfoundShares` computes them once per pair set for an analysis that reads
the same pairs at many sites (the das search, and its step-0 control on the same pairs).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from study.core.labels import IGNORE


@dataclass(frozen=True)
class Confounds:
    """Shares of the pairs considered on which each planted code gives the counterfactual
    label (NaN: the task cannot label sequences, or no pair is considered)."""

    input: float
    answer: float


def _paste(base: np.ndarray, source: np.ndarray, p: np.ndarray, q: np.ndarray,
           window: int) -> np.ndarray:
    """(n, seq) base with its tokens at p - window + 1 .. p replaced by the source's at
    q - window + 1 .. q (offsets before either sequence's start left alone)."""
    out = base.copy()
    rows = np.arange(len(base))
    for o in range(window):
        ok = (p - o >= 0) & (q - o >= 0) & (q - o < source.shape[1]) & (p - o < base.shape[1])
        out[rows[ok], (p - o)[ok]] = source[rows[ok], (q - o)[ok]]
    return out


def _agree(pred: np.ndarray, cf: np.ndarray) -> np.ndarray:
    """(n,) bool: `pred` gives every scored counterfactual label of its row."""
    scored = cf != IGNORE
    return ((pred == cf) | ~scored).all(1) & scored.any(1)


def _shifted(labels: np.ndarray, by: np.ndarray, width: int) -> np.ndarray:
    """(n, width): row i of `labels` read at j + by[i] for j in 0..width-1 (IGNORE outside)."""
    j = np.arange(width)[None, :] + by[:, None]
    ok = (j >= 0) & (j < labels.shape[1])
    out = np.take_along_axis(labels, np.clip(j, 0, labels.shape[1] - 1), 1)
    return np.where(ok, out, IGNORE - 1)  # a value no label takes: outside never agrees


def confounds(task, base_ids, source_ids, cf_labels, base_labels, base_pos, source_pos,
              on=None, window: int = 2) -> Confounds:
    """The input-copy and answer-code shares (`Confounds`) of pairs read at `base_pos` /
    `source_pos` ((n,) each, the site's position in each sequence), over the pairs `on`
    ((n,) bool; default: those whose counterfactual label differs from the base's).
    `base_ids`, `source_ids`, `cf_labels`, `base_labels`: (n, seq) arrays of the pairs."""
    base, source = np.asarray(base_ids, np.int64), np.asarray(source_ids, np.int64)
    cf, bl = np.asarray(cf_labels, np.int64), np.asarray(base_labels, np.int64)
    p, q = np.asarray(base_pos, np.int64), np.asarray(source_pos, np.int64)
    # a pair tells only where its counterfactual label differs from the base's at a position
    # the counterfactual scores (else leaving the base alone already gives it)
    differs = ((cf != bl) & (cf != IGNORE)).any(1)
    on = differs if on is None else np.asarray(on, bool) & differs
    if not on.any():
        return Confounds(float("nan"), float("nan"))
    pasted = task.labels_of(_paste(base, source, p, q, window))
    own = task.labels_of(source)
    if pasted is None or own is None:
        return Confounds(float("nan"), float("nan"))
    as_input = _agree(np.asarray(pasted, np.int64), cf)
    # the source's answer, read at the base's offsets from the site
    from_source = _shifted(np.asarray(own, np.int64), q - p, cf.shape[1])
    first = np.where((bl != IGNORE).any(1), np.argmax(bl != IGNORE, axis=1), cf.shape[1])
    as_answer = _agree(from_source, cf) & (p >= first)
    return Confounds(float(as_input[on].mean()), float(as_answer[on].mean()))


def pair_confounds(task, pt, window: int = 2) -> Confounds:
    """`confounds` of pair tensors `pt` (`study.analyses.common.interchange.PairTensors`) at
    their read positions, over the pairs that test an intervention on the network judged
    (`pt.tested`): the pairs its IIA is scored on."""
    if task is None or not hasattr(task, "labels_of"):
        return Confounds(float("nan"), float("nan"))
    cpu = lambda t: t.cpu().numpy()  # noqa: E731
    return confounds(task, cpu(pt.base_ids), cpu(pt.source_ids), cpu(pt.cf_labels),
                     cpu(pt.base_labels), cpu(pt.base_pos), cpu(pt.source_pos),
                     on=cpu(pt.tested), window=window)


class ConfoundShares:
    """`pair_confounds` of each pair set computed once, for one analysis [ours: the das
    search reads one variable's pairs at every site and position, and its step-0 control
    reads them again, all with the same tested pairs]. A set is known by the `Pairs` object
    its tensors were made from (its identity: the object is held here, so that identity is
    not reused while it is), the task, the read positions and the tested pairs; anything else
    the shares read (tokens and labels) is the pairs' own."""

    def __init__(self, window: int = 2):
        self.window = window
        self._got: dict = {}  # key -> (pairs, task, shares): pairs and task held, see above

    def of(self, task, pairs, pt) -> Confounds:
        """The shares of pair tensors `pt` made from `pairs` (`pair_confounds(task, pt)`)."""
        cpu = lambda t: t.cpu().numpy().tobytes()  # noqa: E731
        key = (id(pairs), id(task), cpu(pt.base_pos), cpu(pt.source_pos), cpu(pt.tested))
        if key not in self._got:
            self._got[key] = (pairs, task, pair_confounds(task, pt, self.window))
        return self._got[key][2]
