"""Interchange interventions through the intervenables of `study/models/sites/pyvene_bridge.py`.

    logits = interchange_ids(iv, base_ids, source_ids)          # (batch, pos, vocab)
    logits = interchange_ids(iv, base_ids, source_ids, base_pos=[[3], [5]],
                             source_pos=[[4], [2]])
    logits = interchange_vectors(iv, base_ids, [3, 5], source_vectors)  # sources read once
    logits = run_sourceless(iv, ids)                            # a source-free intervention

Positions are per example (one list per example, never a bare int: see pyvene's "fast mode"
trap in the bridge's notes); the step kind runs every example at its own step in one
forward, through the row selections `site_intervenable` set up.
"""
from __future__ import annotations

import contextlib

import torch

from study.core.sites import STEP_KINDS
from study.models.sites.capture import state_at
from study.models.sites.pyvene_bridge import _copy_inputs, where
from study.models.sites.pyvene_loader import pyvene


def _rows_at_own_steps(iv, kind: str, base_pos, merged: bool = False, clean=None):
    """Declare (`Sites.per_row`) that a `site_intervenable` call touches each row at its own
    step only (the row masks), so the network may run the hooked steps' sites once on each
    row's own-step state; `merged`: the masks hand every row to the smallest step's
    representation (`Sites.per_row(merged=True)`); `clean`: the rows' clean states there
    (`Sites.per_row(clean=...)`). Costs one host read of device positions;
    nothing is declared while a CUDA graph is being captured (that read would sync): returns
    (the context, whether it declares)."""
    sites = iv.model.net.sites
    if not hasattr(sites, "per_row") or (torch.cuda.is_available()
                                         and torch.cuda.is_current_stream_capturing()):
        return contextlib.nullcontext(), False
    if isinstance(base_pos, list):
        base_pos = [int(p[0]) if isinstance(p, (list, tuple)) else int(p) for p in base_pos]
    return sites.per_row(kind, base_pos, inert=_bridge_hook, merged=merged, clean=clean), True


def _one_intervention(iv) -> bool:
    """Whether one call of the intervention may act for every row: every representation
    holds the same instance (what `site_intervenable` builds) and the network honours a
    merged `Sites.per_row` declaration (class attribute `merges_rows`, e.g. RecurrentLM)."""
    return (getattr(iv.model.net, "merges_rows", False)
            and len({id(v) for v in iv.interventions.values()}) == 1)


def _bridge_hook(fn) -> bool:
    """pyvene's own hooks and `_copy_inputs`: they leave a step no row sits at unchanged."""
    return (getattr(fn, "__module__", None) == pyvene().models.intervenable_base.__name__
            or fn is _copy_inputs)


def _is_scalar(pos) -> bool:
    return isinstance(pos, int) or getattr(pos, "ndim", None) == 0  # int, 0-d tensor/array


def _positions(pos, batch: int, seq: int, n_units: int, name: str) -> list[list[int]]:
    """Per-example position lists (batch, n_units) from per-example ints or lists."""
    if _is_scalar(pos):
        raise ValueError(f"{name}: one integer for the whole batch is refused (pyvene would "
                         f"switch to fast mode for good); give one position list per example")
    rows = pos.tolist() if hasattr(pos, "tolist") else list(pos)
    if len(rows) != batch:
        raise ValueError(f"{name}: {len(rows)} entries for a batch of {batch}")
    out = [[int(r)] if not isinstance(r, (list, tuple)) else [int(p) for p in r] for r in rows]
    for r in out:
        if len(r) != n_units:
            raise ValueError(f"{name}: each example needs {n_units} position(s), got {r}")
        if not all(0 <= p < seq for p in r):
            raise ValueError(f"{name}: position out of range [0, {seq}) in {r}")
    return out


def _steps(pos, batch: int, name: str) -> list[int] | None:
    if pos is None:
        return None
    if _is_scalar(pos):
        raise ValueError(f"{name}: give one step per example, not one integer")
    rows = pos.tolist() if hasattr(pos, "tolist") else list(pos)
    if len(rows) != batch:
        raise ValueError(f"{name}: {len(rows)} entries for a batch of {batch}")
    return [int(r[0]) if isinstance(r, (list, tuple)) else int(r) for r in rows]


def interchange_ids(iv, base: torch.Tensor, source: torch.Tensor | None = None, *,
                    base_pos=None, source_pos=None, subspaces=None) -> torch.Tensor:
    """Run `base` (batch, pos) with the intervenable's site set from `source`; return logits.

    Sequence kinds: `base_pos` is required, one position (or `n_units` positions) per
    example; `source_pos` defaults to `base_pos`. State kind, `site_intervenable`: `base_pos`
    is each example's step, `source_pos` (default: the same) its source step. State kind,
    `module_intervenable` at one step: the base step is the intervenable's index, so `base_pos` may
    be omitted or must equal it for every example; `source_pos` (default: that step) picks
    each example's source step. `source=None` for
    interventions that need no source (zero, collect). `subspaces`: per-example lists of
    feature indices (in the intervention's basis), passed through to pyvene. Positions may
    be lists, numpy arrays or tensors. Gradients reach trainable interventions (DAS); the
    network itself is frozen. Returns (batch, pos, vocab).
    """
    at = where(iv)
    kind, index, n_units = at.kind, at.layer, at.n_units
    batch = base.shape[0]
    if source is not None and source.shape[0] != batch:
        raise ValueError(f"source batch {source.shape[0]} != base batch {batch}")
    if at.per_step:  # every example at its own step
        steps = _steps(base_pos, batch, "base_pos")
        if steps is None or source is None or subspaces is not None:
            raise ValueError("a site_intervenable at the state needs base_pos (one step per "
                             "example), a source and no subspaces")
        src_steps = steps if source_pos is None else _steps(source_pos, batch, "source_pos")
        return interchange_vectors(iv, base, steps, state_at(iv.model.net, source, src_steps))
    _reset_fast(iv)
    kwargs = {}
    if subspaces is not None:
        if isinstance(subspaces, int) or len(subspaces) != batch:
            raise ValueError("subspaces: give one list of feature indices per example")
        kwargs["subspaces"] = [[list(s) for s in subspaces]]
    base_in = {"input_ids": base}
    if kind in STEP_KINDS:
        steps = _steps(base_pos, batch, "base_pos")
        if steps is not None and any(s != index for s in steps):
            raise ValueError(f"base_pos: this intervenable acts at {kind}[{index}]; "
                             f"group examples by step (got steps {sorted(set(steps))})")
        src_steps = _steps(source_pos, batch, "source_pos")
        if source is None or src_steps is None or all(s == index for s in src_steps):
            sources = None if source is None else [{"input_ids": source}]
            _, out = iv(base_in, sources, unit_locations=None, **kwargs)
        else:
            src = state_at(iv.model.net, source, src_steps)  # (batch, width)
            _, out = iv(base_in, unit_locations=None, source_representations=src, **kwargs)
        return out
    if base_pos is None:
        raise ValueError(f"base_pos is required for the {kind!r} kind (per-example positions)")
    bpos = _positions(base_pos, batch, base.shape[1], n_units, "base_pos")
    if source is None:
        locations = {"sources->base": (None, [bpos])}
        _, out = iv(base_in, None, unit_locations=locations, **kwargs)
        return out
    spos = bpos if source_pos is None else _positions(source_pos, batch, source.shape[1],
                                                      n_units, "source_pos")
    locations = {"sources->base": ([spos], [bpos])}
    _, out = iv(base_in, [{"input_ids": source}], unit_locations=locations, **kwargs)
    return out


def run_sourceless(iv, base: torch.Tensor, *, readout: torch.Tensor | None = None) -> torch.Tensor:
    """Run `base` (batch, pos) with the intervenable's source-free intervention (a pyvene
    `ConstantSourceIntervention`, e.g. `AblateIntervention`) applied to its site's whole
    output: every position of a sequence kind, the step of a step kind. `iv`: a
    `module_intervenable`. Returns logits (batch, pos, vocab), or with `readout`
    (batch, pos) bool only the True positions', (n_true, vocab)."""
    at = where(iv)
    _reset_fast(iv)
    if at.per_step:
        raise ValueError("run_sourceless needs an intervenable at one module, not one per step")
    for inter in iv.interventions.values():
        if not getattr(inter, "is_source_constant", False):
            raise ValueError(f"{type(inter).__name__} needs a source; run_sourceless runs "
                             f"source-free interventions only")
    base_in = {"input_ids": base} if readout is None else {"input_ids": base, "readout": readout}
    _, out = iv(base_in, None, unit_locations=None)
    return out


def _reset_fast(iv) -> None:
    """trap: fast mode is sticky once any call passed an integer location."""
    iv.use_fast = False
    for inter in iv.interventions.values():
        inter.use_fast = False


def interchange_vectors(iv, base: torch.Tensor, base_pos, sources: torch.Tensor, *,
                        readout: torch.Tensor | None = None,
                        base_states: torch.Tensor | None = None) -> torch.Tensor:
    """Run `base` (batch, pos) through pyvene with each example's site vector at its position
    `base_pos[i]` intervened on against `sources[i]` (batch, width), vectors read beforehand
    (pyvene's `source_representations`; `study.models.sites.capture.gather_site` reads them).
    `iv`: a `site_intervenable` (the step kind: any step per example) or a
    `module_intervenable`. Returns logits (batch, pos, vocab), or with `readout` (batch, pos)
    bool only the True positions', (n_true, vocab). Gradients reach trainable
    interventions. `base_states` (batch, width): each base's own site vector at base_pos
    without intervention, read beforehand as the sources are (`capture.clean_states`);
    with a `readout` that selects no position before its row's base_pos, a recurrent
    network (`site_intervenable` at the state) starts each row there instead of rerunning
    the steps before it. Ignored without `readout` and at other sites."""
    at = where(iv)
    _reset_fast(iv)
    kind, index, n_units = at.kind, at.layer, at.n_units
    if n_units != 1:
        raise ValueError("interchange_vectors needs an intervenable with one unit per example")
    batch = base.shape[0]
    if sources.shape[0] != batch:
        raise ValueError(f"sources batch {sources.shape[0]} != base batch {batch}")
    pos = torch.as_tensor(base_pos if not isinstance(base_pos, list) else
                          [int(p[0]) if isinstance(p, (list, tuple)) else int(p) for p in base_pos],
                          dtype=torch.long, device=base.device).reshape(-1)  # (batch,)
    if len(pos) != batch:
        raise ValueError(f"base_pos: {len(pos)} entries for a batch of {batch}")
    base_in = {"input_ids": base} if readout is None else {"input_ids": base, "readout": readout}
    if kind in STEP_KINDS:
        if at.per_step:
            layers = at.steps_on(pos.device)  # (n_steps,) each representation's step
            merged = _one_intervention(iv)
            ctx, declared = _rows_at_own_steps(iv, kind, base_pos, merged,
                                               None if readout is None else base_states)
            with ctx:
                # a user's hook on a step site voids the declaration: each step its own rows
                if merged and declared and iv.model.net.sites.declared_rows(kind) is not None:
                    first = layers == pos.min()  # (n_steps,): the smallest step acts for all
                    masks = first[:, None].expand(len(layers), batch)  # (n_steps, batch)
                else:
                    masks = pos[None, :] == layers[:, None]  # (n_steps, batch): own rows
                _, out = iv(base_in, unit_locations=None, source_representations=sources,
                            subspaces=list(masks))
        else:
            if bool((pos != index).any()):
                raise ValueError(f"base_pos: this intervenable acts at {kind}[{index}] only; "
                                 f"use site_intervenable for examples at other steps")
            _, out = iv(base_in, unit_locations=None, source_representations=sources)
        return out
    rows = pos.tolist()
    if not all(0 <= p < base.shape[1] for p in rows):
        raise ValueError(f"base_pos: position out of range [0, {base.shape[1]})")
    locations = {"sources->base": (None, [[[p] for p in rows]])}
    _, out = iv(base_in, unit_locations=locations, source_representations=sources.unsqueeze(1))
    return out
