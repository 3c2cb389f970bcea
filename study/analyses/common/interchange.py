"""Counterfactual pairs as tensors, and the scores of interchange interventions: what the
`patching` and `das` analyses share on top of the site helpers (`study.models.sites.capture`) and
the pyvene bridge (`study.models.sites.pyvene_bridge`).

- `pair_tensors`: a task's `Pairs` on a device, with the positions intervened at
  (`PairTensors`); `answer_positions` for aligned pairs.
- `scored_end`: causal truncation. The networks are causal (a transformer's output at p
  reads tokens <= p; an RNN's state at t reads tokens <= t), so a batch whose scored outputs
  all lie before T can be cut to its first T tokens without changing them.
- `all_right`, `rows_right` (the same from the scored positions only): a row is right when
  every scored position's argmax among the task's output ids is its label, the rule training
  scores with (`study/core/outputs.py`; the pairs carry the output space, `PairTensors.outputs`);
  `logit_diff`: per-row scores of intervened logits.
- `PairTensors.changed`: the pairs whose counterfactual output differs from the base's
  (the causal model's count, `n_changed`).
- `judged`: the network run once on every base without intervention: `PairTensors.base_right`
  (its output is the base label at every scored position) and `PairTensors.tested` (it is,
  and it differs from the counterfactual label at some scored position). Only a tested pair
  shows an intervention: where the network's base output is wrong, or already the
  counterfactual label (counting's phase can be read from the response tokens the base is
  fed), an intervention that does nothing is scored right or the pair says nothing. IIA and
  flip rates are scored on tested pairs (`study/analyses/common/stats.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from study.core.outputs import Outputs
from study.core.labels import IGNORE


@dataclass
class PairTensors:
    """A task's `Pairs` as tensors on a device, with the positions analyses intervene at."""

    base_ids: torch.Tensor  # (n, seq)
    source_ids: torch.Tensor  # (n, seq)
    base_labels: torch.Tensor  # (n, seq) IGNORE where unscored
    cf_labels: torch.Tensor  # (n, seq)
    base_pos: torch.Tensor  # (n,) the base position intervened at
    source_pos: torch.Tensor  # (n,) the source position read
    aligned: bool
    outputs: Outputs = field(default_factory=Outputs)  # the task's output space on the device
    # (n,) bool each, set by `judged`: the network's own base output is the base label
    # (base_right), and also differs from the counterfactual label (tests); None until then
    base_right: torch.Tensor | None = None
    tests: torch.Tensor | None = None
    # (n, width) each base's own site vector at base_pos without intervention, set by
    # `with_base_states` where an intervened forward may start each base there; else None
    base_states: torch.Tensor | None = None
    # (n, seq) the source's own labels (`Pairs.source_labels`), None where the pairs have none
    source_labels: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.base_ids.shape[0])

    @property
    def changed(self) -> torch.Tensor:
        """(n,) bool: the counterfactual output differs from the base's at some scored
        position (`study.tasks.base.Pairs.changed`): the causal model's count of the pairs an
        intervention must change; which of them test one on a given network is `tested`."""
        return (self.cf_labels != self.base_labels).any(1)

    @property
    def tested(self) -> torch.Tensor:
        """(n,) bool: the pairs that test an intervention on the network they were judged on
        (`judged`): its base output is the base label and not the counterfactual one. A
        subset of `changed`."""
        if self.tests is None:
            raise ValueError("these pairs were not run on the network: judge them first "
                             "(study.analyses.common.interchange.judged)")
        return self.tests

    def take(self, idx) -> "PairTensors":
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        return PairTensors(self.base_ids[idx], self.source_ids[idx], self.base_labels[idx],
                           self.cf_labels[idx], self.base_pos[idx], self.source_pos[idx],
                           self.aligned, self.outputs, pick(self.base_right), pick(self.tests),
                           pick(self.base_states), pick(self.source_labels))


@torch.no_grad()
def judged(model, pt: PairTensors, batch_size: int = 512, source: bool = False) -> PairTensors:
    """`pt` with `base_right` and `tests` from the network's own outputs on the bases, run
    without intervention in batches (cut after the last position scored in either label),
    scored by the task's output ids as training scores. A pair tests something when the
    output is the base label at every scored position and not the counterfactual label at
    some scored position; by construction every tested pair is `changed`. With `source`,
    also only where the network's output on the source is the source's own label at every
    position it scores (`PairTensors.source_labels`; ValueError where the pairs have none)
    [ours: a source the network gets wrong may hold another value than the causal model's]."""
    if source and pt.source_labels is None:
        raise ValueError("these pairs carry no source labels, so the network's answers on "
                         "the sources cannot be judged")
    right, tests = [], []
    for lo in range(0, len(pt), batch_size):
        sub = pt.take(slice(lo, lo + batch_size))
        T = max(scored_end(sub.base_labels), scored_end(sub.cf_labels))
        logits = model(sub.base_ids[:, :T])  # (b, T, vocab)
        base_ok = all_right(logits, sub.base_labels, sub.outputs)
        right.append(base_ok)
        ok = base_ok & ~all_right(logits, sub.cf_labels, sub.outputs)
        if source:
            own = model(sub.source_ids[:, :scored_end(sub.source_labels)])  # (b, T', vocab)
            ok = ok & all_right(own, sub.source_labels, sub.outputs)
        tests.append(ok)
    empty = torch.zeros(0, dtype=torch.bool, device=pt.base_ids.device)
    cat = lambda xs: torch.cat(xs) if xs else empty  # noqa: E731
    return replace(pt, base_right=cat(right), tests=cat(tests))


def with_base_states(model, pt: PairTensors, kind: str, batch_size: int = 512) -> PairTensors:
    """`pt` with `base_states`: each base's own `kind` vector at base_pos, read once without
    intervention (`study.models.sites.capture.clean_states`), so that an intervened forward
    of a recurrent network starts each base at its step instead of rerunning the steps
    before it at every call (`interchange_vectors(base_states=...)`) [ours]. `pt` as it is
    where the network cannot, or where a pair scores a position (in either label) before its
    base_pos: its readout would need those steps."""
    from study.models.sites.capture import clean_states

    scored = (pt.base_labels != IGNORE) | (pt.cf_labels != IGNORE)  # (n, seq)
    steps = torch.arange(scored.shape[1], device=scored.device)[None, :]
    if bool((scored & (steps < pt.base_pos[:, None])).any()):
        return pt
    states = clean_states(model, pt.base_ids, kind, pt.base_pos, batch_size)
    return pt if states is None else replace(pt, base_states=states)


def answer_positions(cf_labels: np.ndarray) -> np.ndarray:
    """Last scored position of each row (the answer position of aligned tasks): (n,)."""
    scored = cf_labels != IGNORE
    if not scored.any(1).all():
        raise ValueError("a counterfactual pair has no scored position")
    return cf_labels.shape[1] - 1 - np.argmax(scored[:, ::-1], axis=1)


def pair_tensors(pairs, device, position: int = -1, outputs=None) -> PairTensors:
    """Tensors of a `Pairs`; `position` -1 = the pair's own positions (explicit pairs) or the
    answer position (aligned pairs); p >= 0 = position p in base and source (aligned only).
    `outputs`: the task whose pairs they are (or its `study.core.outputs.Outputs`): the
    output ids the pairs' answers are scored over; None: every token."""
    aligned = bool((pairs.base_pos < 0).all())
    if not aligned and (pairs.base_pos < 0).any():
        raise ValueError(f"pairs of kind {pairs.kind!r} mix aligned and explicit positions")
    if position >= 0:
        if not aligned:
            raise ValueError(f"position {position}: explicit positions apply to aligned pairs "
                             f"only; {pairs.kind!r} pairs carry their own (use -1)")
        if position >= pairs.base_ids.shape[1]:
            raise ValueError(f"position {position} is past the sequence length "
                             f"{pairs.base_ids.shape[1]}")
        bpos = spos = np.full(len(pairs.base_ids), position, np.int64)
    elif aligned:
        bpos = spos = answer_positions(pairs.cf_labels)
    else:
        bpos, spos = pairs.base_pos, pairs.source_pos
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long, device=device)  # noqa: E731
    outs = outputs.to(device) if isinstance(outputs, Outputs) else Outputs.of_task(outputs, device)
    own = getattr(pairs, "source_labels", None)
    return PairTensors(t(pairs.base_ids), t(pairs.source_ids), t(pairs.base_labels),
                       t(pairs.cf_labels), t(bpos), t(spos), aligned, outs,
                       source_labels=None if own is None else t(own))


def scored_end(labels: torch.Tensor, pos: torch.Tensor | None = None) -> int:
    """Length T such that every scored position (and every `pos`) of the batch lies before T."""
    scored = (labels != IGNORE).any(0).nonzero()
    end = int(scored.max()) + 1 if len(scored) else 1
    if pos is not None and len(pos):
        end = max(end, int(pos.max()) + 1)
    return end


def all_right(logits: torch.Tensor, labels: torch.Tensor, outputs: Outputs) -> torch.Tensor:
    """(batch,) bool: every scored position's argmax among the output ids equals the label
    (IGNORE: unscored). logits (batch, T, vocab), labels (batch, >= T)."""
    return outputs.right(logits, labels[:, :logits.shape[1]])


def rows_right(logits: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor, n: int,
               outputs: Outputs):
    """`all_right` from the scored positions only: logits (m, vocab) and labels (m,) of the
    scored positions, rows (m,) the pair each belongs to -> (n,) bool, every scored position
    of the row right (rows with none count as right)."""
    return outputs.rows_right(logits, labels, rows, n)


def logit_diff(logits: torch.Tensor, cf: torch.Tensor, base: torch.Tensor):
    """Mean over positions where the counterfactual answer differs from the base answer of
    logit(cf) - logit(base): ((batch,) float, (batch,) bool "has such a position")."""
    T = logits.shape[1]
    cf, base = cf[:, :T], base[:, :T]
    mask = (cf != base) & (cf != IGNORE) & (base != IGNORE)
    lc = logits.gather(-1, cf.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    lb = logits.gather(-1, base.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    n = mask.sum(1)
    ld = ((lc - lb).float() * mask).sum(1) / n.clamp_min(1)
    return ld, n > 0
