"""Interchange interventions by plain forward hooks on `model.sites`: the fast path shared by
the `patching` and `das` analyses.

pyvene (through `models/nets/pyvene_sites.py`) is the reference implementation; these hooks
do the same replacement without pyvene's per-call set-up, and let many (example, position)
jobs share one forward: each row of a batch carries its own position and its own value.
`tests/analyses/test_patching.py` and `test_das.py` check that both give the same logits.

Vocabulary:
- a *site* is `(kind, layer)`: `model.sites.<kind>[layer]` for the sequence kinds
  (`resid`, `attn_out`, `mlp_out`, `head`; hook output (batch, pos, width)); for the
  recurrent `state` kind the layer is 0 and the position is the time step (one module
  `sites.state[t]` per step, hook output (batch, width)).
- `intervene(model, kind, layer, pos, fn)`: while active, every forward replaces row i's
  vector at position `pos[i]` by `fn(rows, vectors)` (rows: the batch rows handled in that
  call; vectors (len(rows), width)). Gradients flow through `fn` (DAS trains through it).

Causal truncation: the networks are causal (a transformer's output at p reads tokens <= p;
an RNN's state at t reads tokens <= t), so a batch whose scored outputs all lie before T can
be cut to its first T tokens without changing them. `scored_end` gives that T.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from tasks.base import IGNORE

STEP_KINDS = ("state",)  # hook output (batch, width); the others are (batch, pos, width)


def check_site(model, kind: str, layer: int) -> None:
    """Raise ValueError unless the model has `sites.<kind>[layer]` (state: layer 0)."""
    counts = model.sites.kinds()
    if kind not in counts:
        raise ValueError(f"{type(model).__name__} has no {kind!r} sites; it has "
                         f"{', '.join(sorted(counts))}")
    if kind in STEP_KINDS:
        if layer != 0:
            raise ValueError(f"{kind} sites have one layer (0); the position is the time step")
    elif not 0 <= layer < counts[kind]:
        raise ValueError(f"{kind}[{layer}] out of range: the model has {counts[kind]}")


@contextlib.contextmanager
def intervene(model, kind: str, layer: int, pos: torch.Tensor,
              fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Replace each row's site vector at `pos[row]` (pos: (batch,) long) by `fn(rows, vecs)`.

    Hooks are removed on exit whatever happens. Positions must lie inside the input
    (sequence kinds index them; for the state kind a step the input never reaches is simply
    not intervened on).
    """
    handles = []
    pos = pos.to(torch.long)
    try:
        if kind in STEP_KINDS:
            for t in torch.unique(pos).tolist():
                if t >= len(model.sites.state):
                    continue
                rows = (pos == t).nonzero().flatten()

                def hook(_mod, _args, out, rows=rows):  # out (batch, width)
                    rows_ = rows.to(out.device)
                    new = out.clone()
                    new[rows_] = fn(rows_, out[rows_]).to(out.dtype)
                    return new

                handles.append(model.sites.state[t].register_forward_hook(hook))
        else:
            def hook(_mod, _args, out):  # out (batch, seq, width)
                rows = torch.arange(out.shape[0], device=out.device)
                p = pos.to(out.device)
                new = out.clone()
                new[rows, p] = fn(rows, out[rows, p]).to(out.dtype)
                return new

            handles.append(getattr(model.sites, kind)[layer].register_forward_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()


def replace_fn(values: torch.Tensor, features: slice | None = None):
    """An `intervene` fn that writes `values[rows]` (all features, or only `features`)."""
    def fn(rows, vecs):
        v = values[rows.to(values.device)].to(vecs.device)
        if features is None:
            return v
        new = vecs.clone()
        new[:, features] = v
        return new
    return fn


@contextlib.contextmanager
def capture(model, sites: list[tuple[str, int]]) -> Iterator[dict]:
    """Record every listed site's output during the block: {(kind, layer): tensor}.

    Sequence kinds give (batch, pos, width); the state kind gives (batch, steps, width)
    (the per-step outputs stacked once the block ends). Tensors are detached.
    """
    store: dict = {}
    steps: dict = {}
    handles = []
    try:
        for kind, layer in sites:
            if kind in STEP_KINDS:
                for t, mod in enumerate(model.sites.state):
                    def grab_step(_m, _a, out, t=t):
                        steps[t] = out.detach()
                    handles.append(mod.register_forward_hook(grab_step))
            else:
                def grab(_m, _a, out, key=(kind, layer)):
                    store[key] = out.detach()
                handles.append(getattr(model.sites, kind)[layer].register_forward_hook(grab))
        yield store
    finally:
        for h in handles:
            h.remove()
        if steps:
            store[("state", 0)] = torch.stack([steps[t] for t in sorted(steps)], dim=1)


def gather_site(model, ids: torch.Tensor, kind: str, layer: int, pos: torch.Tensor,
                batch_size: int = 512) -> torch.Tensor:
    """Each row's site vector at `pos[row]`, in batches, without gradients: (n, width)."""
    out = []
    for lo in range(0, len(ids), batch_size):
        p = pos[lo:lo + batch_size].to(ids.device)
        x = ids[lo:lo + batch_size, :int(p.max()) + 1]
        with torch.no_grad(), capture(model, [(kind, layer)]) as acts:
            model(x)
        a = acts[(kind, layer)]  # (b, pos, width)
        out.append(a[torch.arange(len(x), device=a.device), p])
    return torch.cat(out)


# --------------------------------------------------------------------------- pairs

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

    def __len__(self) -> int:
        return int(self.base_ids.shape[0])

    def take(self, idx) -> "PairTensors":
        return PairTensors(self.base_ids[idx], self.source_ids[idx], self.base_labels[idx],
                           self.cf_labels[idx], self.base_pos[idx], self.source_pos[idx],
                           self.aligned)


def answer_positions(cf_labels: np.ndarray) -> np.ndarray:
    """Last scored position of each row (the answer position of aligned tasks): (n,)."""
    scored = cf_labels != IGNORE
    if not scored.any(1).all():
        raise ValueError("a counterfactual pair has no scored position")
    return cf_labels.shape[1] - 1 - np.argmax(scored[:, ::-1], axis=1)


def pair_tensors(pairs, device, position: int = -1) -> PairTensors:
    """Tensors of a `Pairs`; `position` -1 = the pair's own positions (explicit pairs) or the
    answer position (aligned pairs); p >= 0 = position p in base and source (aligned only)."""
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
    return PairTensors(t(pairs.base_ids), t(pairs.source_ids), t(pairs.base_labels),
                       t(pairs.cf_labels), t(bpos), t(spos), aligned)


def scored_end(labels: torch.Tensor, pos: torch.Tensor | None = None) -> int:
    """Length T such that every scored position (and every `pos`) of the batch lies before T."""
    scored = (labels != IGNORE).any(0).nonzero()
    end = int(scored.max()) + 1 if len(scored) else 1
    if pos is not None and len(pos):
        end = max(end, int(pos.max()) + 1)
    return end


def all_right(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(batch,) bool: every scored position's argmax equals the label (IGNORE: unscored)."""
    T = logits.shape[1]
    lab = labels[:, :T]
    return ((logits.argmax(-1) == lab) | (lab == IGNORE)).all(1)


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
