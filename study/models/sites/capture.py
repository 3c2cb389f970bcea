"""Reading the activations at a network's sites with forward hooks.

A forward hook on `model.sites.<kind>[i]` sees exactly the tensor the site names (shapes in
`study/core/sites.py`). Every helper here removes its hooks in `finally`, so a failing
forward never leaves one behind.

- `hooked`: run `fn(tensor)` at chosen sites of one kind during a block (a return value
  replaces the activation); `hooked_many` does it for several kinds.
- `collect` / `grouped_collect`: numpy activations of many sequences, in batches.
- `capture`: the activations of the forward calls made during a block, as tensors.
- `gather_site`, `state_at`: each example's vector at its own position or step;
  `clean_states`: the same as a recurrent network computes it before intervening there.
- `site_widths`: the width of each kind a network offers; `device_of`: where it lives.

The step kind is read as a sequence: `collect` and `capture` stack its per-step outputs into
(n, n_steps, width) under the key ("state", 0), so that every kind reads as (n, pos, width).
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from study.core.sites import STEP_KINDS


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


@contextmanager
def hooked_many(model, per_kind: dict[str, dict[int, Callable]]) -> Iterator[None]:
    """`hooked` for several kinds at once: {kind: {index: fn}}."""
    with ExitStack() as stack:
        for kind, fns in per_kind.items():
            stack.enter_context(hooked(model, kind, fns))
        yield


def batches(n: int, batch_size: int):
    """Slices [0, b), [b, 2b), ... covering range(n)."""
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


@torch.no_grad()
def collect(model, ids: np.ndarray, sites: list[tuple[str, int]], device,
            batch_size: int = 256) -> dict[tuple[str, int], np.ndarray]:
    """Activations of `ids` (n, pos) at each (kind, layer) site -> float32 numpy arrays.

    Sequence kinds -> (n, pos, width). `("state", 0)` stands for every recurrent step and
    yields (n, n_steps_run, width). A site the forward never ran (e.g. attn2's missing
    layer-0 MLP) is absent from the result."""
    step_sites = [kind for kind, _ in sites if kind in STEP_KINDS]
    groups: dict[str, list[int]] = {}
    for kind, i in sites:
        if kind not in STEP_KINDS:
            groups.setdefault(kind, []).append(i)
    for kind in step_sites:
        groups[kind] = list(range(model.sites.kinds()[kind]))
    store: dict[tuple[str, int], list[torch.Tensor]] = {}

    def recorder(key):
        def fn(t):
            store.setdefault(key, []).append(t.detach().float().cpu())
        return fn

    with hooked_many(model, {k: {i: recorder((k, i)) for i in idx} for k, idx in groups.items()}):
        for s in batches(len(ids), batch_size):
            model(torch.as_tensor(ids[s], device=device))
    n_batches = len(range(0, len(ids), batch_size))
    out: dict[tuple[str, int], np.ndarray] = {}
    for key, parts in store.items():
        if key[0] not in STEP_KINDS and len(parts) == n_batches:
            out[key] = torch.cat(parts).numpy()  # (n, pos, width)
    for kind in step_sites:
        steps = [torch.cat(store[(kind, t)]) for t in groups[kind]
                 if len(store.get((kind, t), [])) == n_batches]
        if steps:
            out[(kind, 0)] = torch.stack(steps, dim=1).numpy()  # (n, n_steps, width)
    return out


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


@contextmanager
def capture(model, sites: list[tuple[str, int]]) -> Iterator[dict]:
    """Record every listed site's output during the block: {(kind, layer): tensor}.

    Sequence kinds give (batch, pos, width); the step kind gives (batch, steps, width)
    (the per-step outputs stacked once the block ends). Tensors are detached.
    """
    store: dict = {}
    steps: dict = {}
    handles = []
    try:
        for kind, layer in sites:
            if kind in STEP_KINDS:
                for t, mod in enumerate(getattr(model.sites, kind)):
                    def grab_step(_m, _a, out, key=(kind, t)):  # out (batch, width)
                        steps[key] = out.detach()
                    handles.append(mod.register_forward_hook(grab_step))
            else:
                def grab(_m, _a, out, key=(kind, layer)):  # out (batch, pos, width)
                    store[key] = out.detach()
                handles.append(getattr(model.sites, kind)[layer].register_forward_hook(grab))
        yield store
    finally:
        for h in handles:
            h.remove()
        for kind in dict.fromkeys(k for k, _ in steps):
            ts = sorted(t for k, t in steps if k == kind)
            store[(kind, 0)] = torch.stack([steps[(kind, t)] for t in ts], dim=1)


def gather_site(model, ids: torch.Tensor, kind: str, layer: int, pos: torch.Tensor,
                batch_size: int = 512) -> torch.Tensor:
    """Each row's site vector at `pos[row]`, in batches, without gradients: (n, width).

    The network is causal, so each batch is cut after its last position."""
    out = []
    for lo in range(0, len(ids), batch_size):
        p = pos[lo:lo + batch_size].to(ids.device)
        x = ids[lo:lo + batch_size, :int(p.max()) + 1]
        with torch.no_grad(), capture(model, [(kind, layer)]) as acts:
            model(x)
        a = acts[(kind, layer)]  # (b, pos, width)
        out.append(a[torch.arange(len(x), device=a.device), p])
    return torch.cat(out)


def clean_states(model, ids: torch.Tensor, kind: str, pos: torch.Tensor,
                 batch_size: int = 512) -> torch.Tensor | None:
    """Each row's `kind` vector at its own step `pos[row]` in a forward without intervention,
    as the network computes it on its way to an intervention there
    (`RecurrentLM.clean_states`), in batches of `batch_size` rows: (n, width), what
    `interchange_vectors(base_states=...)` takes. None where the network cannot start a row
    at its step (a sequence kind, or a network without `clean_states`)."""
    if kind not in STEP_KINDS or not hasattr(model, "clean_states"):
        return None
    return torch.cat([model.clean_states(ids[s], pos[s]) for s in batches(len(ids), batch_size)])


def state_at(model: nn.Module, ids: torch.Tensor, steps: Sequence[int]) -> torch.Tensor:
    """The state after token `steps[i]` of example i, read with plain hooks: (batch, width)."""
    want = torch.as_tensor(list(steps), device=ids.device)
    out = [None] * len(want)
    handles = []
    try:
        for t in sorted(set(int(s) for s in steps)):
            rows = (want == t).nonzero().flatten()

            def grab(_mod, _args, y, rows=rows):  # y (batch, width)
                for r in rows.tolist():
                    out[r] = y[r]

            handles.append(model.sites.state[t].register_forward_hook(grab))
        model(ids)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(out)  # (batch, width)


def site_widths(model: nn.Module) -> dict[str, int]:
    """Width (features per position or step) of each site kind `model.sites` offers.

    Read from the network's shape table `model.site_kinds()` where it has one (every network
    the model registry builds); otherwise the network is run once on a one-token input and
    the hooked shapes are read.
    """
    counts = model.sites.kinds()
    widths = ({k.name: int(k.width) for k in model.site_kinds()} if hasattr(model, "site_kinds")
              else _probe_widths(model))
    missing = [k for k in counts if k not in widths]
    if missing:
        raise ValueError(f"no width known for site kinds {missing} of {type(model).__name__}")
    return {k: widths[k] for k in counts}


def _probe_widths(model: nn.Module) -> dict[str, int]:
    widths: dict[str, int] = {}

    def record(kind):
        def fn(out):
            widths[kind] = int(out.shape[-1])
        return fn

    per_kind = {kind: {i: record(kind) for i in range(n)}
                for kind, n in model.sites.kinds().items()}
    device = device_of(model)
    with torch.no_grad(), hooked_many(model, per_kind):
        model(torch.zeros(1, 1, dtype=torch.long, device=device))  # (1, 1): token 0
    return widths


def device_of(model: nn.Module) -> torch.device:
    """Where a network's weights (or, without parameters, its buffers) live."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")
