"""Reading, and temporarily replacing, the activations at a model's sites with forward hooks.

Every network exposes identity `Site` modules under `model.sites.<kind>[i]` (see
`models/base.py`); a forward hook on one sees exactly the tensor the site names and may return
a replacement. Hooks are removed in `finally`, so a failing forward never leaves one behind.

Shapes: per-position kinds (`resid`, `attn_out`, `mlp_out`, `head`) give (batch, pos, width);
`state[t]` gives (batch, width) for token t, and `collect` stacks the steps into
(n, n_steps, width) under the key ("state", 0) so that every kind reads as (n, pos, width).
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator

import numpy as np
import torch


def site_kinds(model) -> dict[str, int]:
    """{kind: number of modules} of `model.sites`."""
    return {name: len(mods) for name, mods in model.sites.named_children()}


@contextmanager
def hooked(model, kind: str, fns: dict[int, Callable]) -> Iterator[None]:
    """Install `fns[i](tensor) -> tensor | None` as forward hooks on `sites.<kind>[i]`."""
    mods = getattr(model.sites, kind)
    handles = []
    try:
        for i, fn in fns.items():
            handles.append(mods[i].register_forward_hook(lambda m, inp, out, fn=fn: fn(out)))
        yield
    finally:
        for h in handles:
            h.remove()


def batches(n: int, batch_size: int):
    """Slices [0, b), [b, 2b), ... covering range(n)."""
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


@torch.no_grad()
def collect(model, ids: np.ndarray, sites: list[tuple[str, int]], device,
            batch_size: int = 256) -> dict[tuple[str, int], np.ndarray]:
    """Activations of `ids` (n, pos) at each (kind, index) site -> float32 numpy arrays.

    Per-position kinds -> (n, pos, width). `("state", 0)` stands for every recurrent step and
    yields (n, n_steps_run, width). A site the forward never ran (e.g. attn2's missing
    layer-1 MLP) is absent from the result."""
    want_state = ("state", 0) in sites
    groups: dict[str, list[int]] = {}
    for kind, i in sites:
        if kind != "state":
            groups.setdefault(kind, []).append(i)
    if want_state:
        groups["state"] = list(range(site_kinds(model)["state"]))
    store: dict[tuple[str, int], list[torch.Tensor]] = {}

    def recorder(key):
        def fn(t):
            store.setdefault(key, []).append(t.detach().float().cpu())
        return fn

    with _stack(model, {k: {i: recorder((k, i)) for i in idx} for k, idx in groups.items()}):
        for s in batches(len(ids), batch_size):
            model(torch.as_tensor(ids[s], device=device))
    n_batches = len(range(0, len(ids), batch_size))
    out: dict[tuple[str, int], np.ndarray] = {}
    for key, parts in store.items():
        if key[0] != "state" and len(parts) == n_batches:
            out[key] = torch.cat(parts).numpy()
    if want_state:
        steps = [torch.cat(store[("state", t)]) for t in groups["state"]
                 if len(store.get(("state", t), [])) == n_batches]
        if steps:
            out[("state", 0)] = torch.stack(steps, dim=1).numpy()  # (n, n_steps, width)
    return out


@contextmanager
def _stack(model, per_kind: dict[str, dict[int, Callable]]):
    """`hooked` for several kinds at once."""
    with ExitStack() as stack:
        for kind, fns in per_kind.items():
            stack.enter_context(hooked(model, kind, fns))
        yield


def grouped_collect(model, ids: np.ndarray, sites: list[tuple[str, int]], device,
                    batch_size: int = 256, max_floats: float = 2.5e8):
    """Yield `collect` results for groups of sites whose activations together stay under
    `max_floats` numbers (a long, wide model is read a few layers at a time)."""
    widths = {k: v.shape for k, v in collect(model, ids[:1], sites, device).items()}
    group, size = [], 0.0
    for site in sites:
        if site not in widths:
            continue
        one = len(ids) * float(np.prod(widths[site][1:]))
        if group and size + one > max_floats:
            yield collect(model, ids, group, device, batch_size)
            group, size = [], 0.0
        group.append(site)
        size += one
    if group:
        yield collect(model, ids, group, device, batch_size)
