"""The hook-based reference the pyvene path is tested against: replacing the activation at
one site, per example, with plain forward hooks.

The library intervenes only through pyvene (`study/models/sites/pyvene_bridge.py`). These
hooks are written independently of it, so tests that compare the two (same logits) check
what the bridge guards in pyvene against the plain meaning of "replace this vector".

`intervene(model, kind, layer, pos, fn)`: while active, every forward replaces row i's
vector at position `pos[i]` by `fn(rows, vectors)` (rows: the batch rows handled in that
call; vectors (len(rows), width)). Each row carries its own position, so many
(example, position) jobs share one forward. Gradients flow through `fn`. For the step kind
the position is the time step: row i is replaced at `sites.state[pos[i]]`.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

from study.core.sites import STEP_KINDS


@contextlib.contextmanager
def intervene(model, kind: str, layer: int, pos: torch.Tensor,
              fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Replace each row's site vector at `pos[row]` (pos: (batch,) long) by `fn(rows, vecs)`.

    Hooks are removed on exit whatever happens. Positions must lie inside the input
    (sequence kinds index them; for the step kind a step the input never reaches is simply
    not intervened on).
    """
    handles = []
    pos = pos.to(torch.long)
    try:
        if kind in STEP_KINDS:
            steps = getattr(model.sites, kind)
            for t in torch.unique(pos).tolist():
                if t >= len(steps):
                    continue
                rows = (pos == t).nonzero().flatten()

                def hook(_mod, _args, out, rows=rows):  # out (batch, width)
                    rows_ = rows.to(out.device)
                    new = out.clone()
                    new[rows_] = fn(rows_, out[rows_]).to(out.dtype)
                    return new

                handles.append(steps[t].register_forward_hook(hook))
        else:
            def hook(_mod, _args, out):  # out (batch, pos, width)
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
    """An `intervene` fn that writes `values[rows]` (all features, or only `features`).

    values: (batch, width), or (batch, len(features)) with `features`."""
    def fn(rows, vecs):
        v = values[rows.to(values.device)].to(vecs.device)
        if features is None:
            return v
        new = vecs.clone()
        new[:, features] = v
        return new
    return fn
