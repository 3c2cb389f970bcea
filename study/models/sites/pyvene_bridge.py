"""The one place our networks meet pyvene: site registration, intervenable models, interchanges.

Every network exposes its intervention sites as identity modules under `model.sites`
(`study/models/sites/modules.py`). This module makes them addressable by pyvene under the site-kind names
(`study.core.sites.KINDS`: `"resid"`, `"attn_out"`, `"mlp_out"`, `"head"`, `"state"`) and runs
interchange interventions on per-example aligned positions.

    iv = intervenable(model, "state", 7, "rotated")            # DAS at the state after token 7
    logits = interchange(iv, base_ids, source_ids)              # (batch, pos, vocab)
    iv = intervenable(model, "resid", 1, "vanilla")             # patch the stream entering layer 1
    logits = interchange(iv, base_ids, source_ids, base_pos=[[3], [5]], source_pos=[[4], [2]])
    iv = site_intervenable(model, "state", 0, alignment)        # every example at its own step
    logits = interchange(iv, base_ids, source_ids, base_pos=[3, 5], source_pos=[4, 2])
    logits = interchange_vectors(iv, base_ids, [3, 5], source_vectors)  # sources read once

    iv = intervenable(model, "head", 1, AblateIntervention(features=(0, 4)))
    logits = run_sourceless(iv, ids)                            # head 0 of layer 1 silenced

This is the one way the library intervenes on a network. The analyses (`patching`, `das`,
the cross-run stitching of `compare`) run through `site_intervenable` and
`interchange_vectors`: the source vectors of a set of pairs are read once (they do not change
while an alignment trains) and handed to pyvene as `source_representations`, and `readout=`
asks the network for the logits of the scored positions only. Head ablation (`circuits`)
runs a source-free intervention over a site's whole output (`run_sourceless`). Our own
interventions (patching a feature range, writing given values, ablation, per-step row
selection) are in `study/models/sites/pyvene_interventions.py`.

pyvene wraps a `PyveneView` of the network (`register(model)`): the network plus the two
attributes pyvene reads from a model, `.config` (here: the width of each site kind, so the
registered dimension mapping is right for every instance, whatever its size) and `.device`.
The view's class is registered once in `pyvene.type_to_module_mapping` with
`"<kind>": ("net.sites.<kind>[%s]", "register_forward_hook")` and in
`type_to_dimension_mapping` with the kind's width; the view's forward takes `input_ids` (and
`readout`, the scored positions, `study.core.network`), so pyvene's
`model(**{"input_ids": ids})` calls reach any of our networks.

Sites and positions. Sequence kinds (`resid`, `attn_out`, `mlp_out`, `head`) have hook output
(batch, pos, width): the layer is the intervenable's index and the positions are per example
(`base_pos`, `source_pos`: one list of positions per example). The `state` kind has hook output
(batch, width) and one module per time step, so the base step is the intervenable's index
(the same for the whole batch: group examples by step); the source state may come from a
different step per example (`source_pos`), which is read with plain hooks and handed to
pyvene as a source representation. `site_intervenable` lifts the one-step limit: it holds one
representation per step, all with the same intervention, and each call tells every step which
examples are its own (a row selection passed as that step's `subspaces`,
`study/models/sites/pyvene_interventions.py`), so a batch whose examples sit at different steps runs
in one forward.

pyvene 0.1.8 traps guarded here (each has a test in tests/models/test_rnn.py):
- Every `IntervenableModel` call removes *every* forward and pre-forward hook on the wrapped
  model, a user's too (`_cleanup_states` -> `remove_forward_hooks`). `intervenable` (`_guard`)
  replaces that clean-up on the instance with one that removes only pyvene's own hooks, so hooks you
  registered survive any call (also one made directly, not through `interchange`). Do not
  use `IntervenableModel.train_alignment`, which calls the hook-wiping function directly.
- One integer location (`unit_locations={"base": 3}` or a flat list) switches the instance
  to "fast" mode for good; afterwards only the first example's location is used for the
  whole batch. `interchange` only ever passes per-example nested lists, rejects bare ints,
  and resets the instance's fast flags before each call.
- pyvene's per-timestep unit `"t"` for recurrent models is wrong at every batch size; our
  recurrent networks are unrolled with one `state[t]` site per step instead, and the state
  kind is addressed as an ordinary module per step (no `"t"` unit).
- Models pyvene does not know must carry `.config` and `.device` (pyvene reads both);
  `PyveneView` provides them instead of asking every network to.
- Building an `IntervenableModel` freezes the model (`requires_grad=False` on every
  parameter) and puts it in eval mode. That is what an analysis wants (dropout off, only the
  intervention trains), and we keep it; a training loop must not share the instance.
- pyvene clears the dict passed as `source_representations` after a call; `interchange`
  builds a fresh one each time.
- `save_intervention`/`load_intervention` map to `cuda:0`: use `IntervenableModel.save` and
  the static `IntervenableModel.load(directory, register(model))` instead; `save_pyvene` and
  `load_intervenable` call them with pyvene's prints ("Directory ... created", "... already
  exists") and root-logger warnings ("The key is provided in the config ...", logged by every
  load) kept off stdout and stderr (`study/models/quiet.py`). Custom intervention classes must
  live in an importable module to load (pyvene saves their type names). A loaded model
  wipes hooks again; `interchange` and `interchange_vectors` adopt it (`adopt`).
- pyvene writes an intervention into the hooked module's output tensor in place, and a
  `Site` returns its input: the tensor the network handed in would change too, and autograd
  refuses a tensor it saved for backward (the output of a tanh, say) once it was written
  to. During every call the hooked sites get a fresh copy of their input (a pre-hook), so
  only the copy, which the network reads on from, is written to.
- Not a pyvene bug, but easy to misread: pyvene registers its hooks at call time, so a hook
  you registered earlier on the same site runs first and sees the value *before* the
  intervention; read the result downstream (e.g. a pre-hook on the next module).
- Importing pyvene takes ~9 s and prints a notice to stdout: it is imported lazily, inside
  functions, with stdout captured (`study/models/sites/pyvene_loader.py`). pyvene logs its
  warnings through the root logger; building, saving and loading an `IntervenableModel`
  here run under `quiet()` (`study/models/quiet.py`), which drops them for that call only.
"""
from __future__ import annotations

import contextlib
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from study.core.errors import UsageError
from study.core.sites import KINDS, STEP_KINDS, check_site
from study.models.sites.capture import device_of, site_widths, state_at
from study.models.quiet import quiet
from study.models.sites.pyvene_loader import pyvene
from study.core.network import read_out

# pyvene's intervention classes by short name (a class or an instance may be passed instead).
INTERVENTIONS = {
    "vanilla": "VanillaIntervention",
    "rotated": "RotatedSpaceIntervention",
    "low_rank_rotated": "LowRankRotatedSpaceIntervention",
    "boundless_rotated": "BoundlessRotatedSpaceIntervention",
    "zero": "ZeroIntervention",
    "collect": "CollectIntervention",
    "addition": "AdditionIntervention",
    "subtraction": "SubtractionIntervention",
}

# --------------------------------------------------------------------------- registration

class PyveneView(nn.Module):
    """What pyvene wraps: the network, plus the `.config` and `.device` pyvene reads.

    `config` holds one attribute per site kind, its width; the registered dimension mapping
    points at it, so each view reports its own network's sizes.
    """

    def __init__(self, net: nn.Module, widths: dict[str, int]):
        super().__init__()
        self.net = net
        self.config = SimpleNamespace(**widths)

    @property
    def device(self) -> torch.device:
        return device_of(self.net)

    def forward(self, input_ids: torch.Tensor, readout: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, pos) -> logits (batch, pos, vocab); with `readout` (batch, pos) bool only the
        True positions' logits, (n_true, vocab), the output layer running nowhere else."""
        if readout is None:
            return self.net(input_ids)
        return read_out(self.net, input_ids, readout)


def register(model: nn.Module) -> PyveneView:
    """Register our site vocabulary with pyvene and return the view of `model` it wraps."""
    pv = pyvene()
    if PyveneView not in pv.type_to_module_mapping:
        hook = "register_forward_hook"  # every site is read/replaced at its output
        pv.type_to_module_mapping[PyveneView] = {k: (f"net.sites.{k}[%s]", hook) for k in KINDS}
        # resolved by pyvene as getattr(view.config, kind): this instance's width
        pv.type_to_dimension_mapping[PyveneView] = {k: (k,) for k in KINDS}
    return PyveneView(model, site_widths(model))


def _drop_pyvene_hooks(model: nn.Module, modules=None) -> None:
    """Remove the hooks pyvene registered on `model` (or only on `modules`, the ones it hooks)
    and leave every other hook in place."""
    own = pyvene().models.intervenable_base.__name__  # where pyvene's hook callbacks live
    for m in (model.modules() if modules is None else modules):
        for hooks, extras in (
            (m._forward_hooks, (m._forward_hooks_with_kwargs, m._forward_hooks_always_called)),
            (m._forward_pre_hooks, (m._forward_pre_hooks_with_kwargs,)),
        ):
            for key in [k for k, fn in hooks.items() if getattr(fn, "__module__", None) == own]:
                del hooks[key]
                for extra in extras:
                    extra.pop(key, None)


def _make_intervention(intervention: Any, embed_dim: int, kwargs: dict):
    pv = pyvene()
    if isinstance(intervention, str):
        if intervention not in INTERVENTIONS:
            raise ValueError(f"unknown intervention {intervention!r}; known: {', '.join(INTERVENTIONS)}")
        intervention = getattr(pv, INTERVENTIONS[intervention])
    if isinstance(intervention, type):
        return intervention(embed_dim=embed_dim, **kwargs)
    if kwargs:
        raise ValueError("intervention keyword arguments are only used when a name or class is given")
    dim = getattr(intervention, "embed_dim", None)
    if dim is not None and int(dim) != embed_dim:
        raise ValueError(f"intervention has embed_dim {int(dim)}, the site needs {embed_dim}")
    return intervention


def intervenable(model: nn.Module, kind: str, index: int, intervention: Any = "vanilla", *,
                 n_units: int = 1, **intervention_kwargs):
    """A `pyvene.IntervenableModel` acting on `model.sites.<kind>[index]`.

    `intervention`: a name from `INTERVENTIONS`, a pyvene intervention class (built with
    `embed_dim` = the site width times `n_units`, plus `intervention_kwargs`, e.g.
    `low_rank_dimension=4`) or a ready instance (shared instances let one alignment act at
    several sites). `n_units`: positions intervened on per example (sequence kinds; pyvene
    flattens them into one vector for distributed interventions). The model is frozen and
    put in eval mode (pyvene); its hooks survive calls (see the module docstring).
    """
    pv = pyvene()
    check_site(model, kind, index, per_module=True)
    if n_units < 1 or (kind in STEP_KINDS and n_units != 1):
        raise ValueError(f"n_units={n_units}: must be >= 1, and 1 for the {kind!r} kind")
    view = register(model)
    width = view.config.__dict__[kind]
    inst = _make_intervention(intervention, width * n_units, intervention_kwargs)
    rep = pv.RepresentationConfig(layer=index, component=kind, unit="pos",
                                  max_number_of_units=n_units, intervention=inst)
    with quiet():
        iv = pv.IntervenableModel(pv.IntervenableConfig(representations=[rep]), view,
                                  use_fast=False)
    _guard(iv)
    iv.study_site = (kind, index, n_units)
    iv.study_steps = False
    return iv


def _guard(iv) -> None:
    """Install on one IntervenableModel the guards of the traps in the module docstring:
    - pyvene's clean-up wipes every hook on the model: keep the user's, and look only at the
      modules pyvene hooks;
    - pyvene writes interventions into the hooked site's output in place, and a `Site`
      returns its input: every call gives the sites a fresh copy of their input first, so
      no tensor the network holds elsewhere (or autograd saved, e.g. a tanh's output) is
      written to;
    - cost: pyvene re-checks every cached activation for recurrent-state bookkeeping once per
      representation and call (quadratic in the step kind's representations); our networks
      are stateless to pyvene, where that check is a no-op by construction: skipped."""
    hooked = list({id(h.__self__): h.__self__ for h in iv.intervention_hooks.values()}.values())
    iv._remove_forward_hooks = types.MethodType(
        lambda self: _drop_pyvene_hooks(self.model, hooked), iv)
    if iv.is_model_stateless:
        iv._tidy_stateful_activations = lambda: None
    forward = iv.forward

    def fresh_inputs_forward(*args, **kwargs):
        handles = [m.register_forward_pre_hook(_copy_inputs) for m in hooked]
        try:
            return forward(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()

    iv.forward = fresh_inputs_forward


def _copy_inputs(_module, args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _rows_at_own_steps(iv, kind: str, base_pos, merged: bool = False):
    """Declare (`Sites.per_row`) that a `site_intervenable` call touches each row at its own
    step only (the row masks), so the network may run the hooked steps' sites once on each
    row's own-step state; `merged`: the masks hand every row to the smallest step's
    representation (`Sites.per_row(merged=True)`). Costs one host read of device positions;
    nothing is declared while a CUDA graph is being captured (that read would sync): returns
    (the context, whether it declares)."""
    sites = iv.model.net.sites
    if not hasattr(sites, "per_row") or (torch.cuda.is_available()
                                         and torch.cuda.is_current_stream_capturing()):
        return contextlib.nullcontext(), False
    if isinstance(base_pos, list):
        base_pos = [int(p[0]) if isinstance(p, (list, tuple)) else int(p) for p in base_pos]
    return sites.per_row(kind, base_pos, inert=_bridge_hook, merged=merged), True


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


def site_intervenable(model: nn.Module, kind: str, layer: int, intervention: Any = "patch"):
    """A `pyvene.IntervenableModel` acting at the analyses' site `(kind, layer)`, each
    example at its own position (`interchange_vectors`, `interchange`).

    Sequence kinds: `intervenable(model, kind, layer, intervention)`, one representation at
    `sites.<kind>[layer]`. The step kind (layer 0): one representation per time step t at
    `sites.state[t]`, every one holding the same intervention instance, which must take a
    row selection as `subspaces` (`study/models/sites/pyvene_interventions.py`; the DAS alignments
    and `PatchIntervention` do). `intervention`: "patch" (`PatchIntervention`, the vanilla
    interchange), a pyvene intervention class (built with the site's width) or an instance.
    """
    check_site(model, kind, layer)
    if isinstance(intervention, str) and intervention == "patch":
        from study.models.sites.pyvene_interventions import PatchIntervention
        intervention = PatchIntervention
    if kind not in STEP_KINDS:
        return intervenable(model, kind, layer, intervention)
    pv = pyvene()
    view = register(model)
    inst = _make_intervention(intervention, view.config.__dict__[kind], {})
    if not getattr(inst, "takes_row_mask", False):
        raise ValueError(f"{type(inst).__name__} cannot be told which examples to intervene "
                         f"on at each step (study/models/sites/pyvene_interventions.py); the {kind} "
                         f"kind needs that, or intervenable(model, {kind!r}, step, ...) for "
                         f"one step")
    reps = [pv.RepresentationConfig(layer=t, component=kind, unit="pos", max_number_of_units=1,
                                    intervention=inst)
            for t in range(model.sites.kinds()[kind])]
    with quiet():
        iv = pv.IntervenableModel(pv.IntervenableConfig(representations=reps), view,
                                  use_fast=False)
    _guard(iv)
    iv.study_site = (kind, layer, 1)
    iv.study_steps = True
    return iv


def adopt(iv):
    """Mark an `IntervenableModel` over our sites that this module did not build (one that
    `IntervenableModel.load` rebuilt) with its site, and guard the user's hooks. Returns iv."""
    if hasattr(iv, "study_site"):
        return iv
    reps = list(iv.representations.values())
    kinds = {r.component for r in reps}
    if len(kinds) != 1 or not kinds <= set(KINDS) or not isinstance(iv.model, PyveneView):
        raise ValueError("not an intervenable over one site kind of a study network (built by "
                         "site_intervenable or intervenable, or loaded onto register(model))")
    kind = reps[0].component
    if kind in STEP_KINDS and len(reps) > 1:
        iv.study_site, iv.study_steps = (kind, 0, 1), True
    elif len(reps) == 1:
        iv.study_site = (kind, int(reps[0].layer), int(reps[0].max_number_of_units))
        iv.study_steps = False
    else:
        raise ValueError(f"an intervenable with {len(reps)} {kind} representations: one is "
                         f"expected (or one per step of the state kind)")
    _guard(iv)
    return iv


def save_pyvene(iv, directory) -> None:
    """pyvene's own `IntervenableModel.save` into `directory` (made if missing), quietly.
    `load_intervenable(directory, model)` (or pyvene's `IntervenableModel.load(directory,
    register(model))`) reads it."""
    with quiet():
        iv.save(str(directory))


def load_intervenable(directory, model: nn.Module):
    """The `pyvene.IntervenableModel` saved in `directory` by `IntervenableModel.save` (the
    das analysis writes them under RUN/analyses/das/pyvene/), rebuilt over `model`'s sites:
    pyvene's own `IntervenableModel.load(directory, register(model))`, quietly, adopted
    (`adopt`) so `interchange`, `interchange_vectors` and `study.iia` take it as it is.

        iv = load_intervenable("RUN/analyses/das/pyvene/oaf/up_down-count/state@pair", net)
    """
    config = Path(directory) / "config.json"
    if not config.is_file():
        raise UsageError(f"load_intervenable: {directory} holds no pyvene config.json; give a "
                         f"directory IntervenableModel.save wrote (the das analysis's are "
                         f"listed in RUN/analyses/das/pyvene/index.json)")
    pv = pyvene()
    view = register(model)
    with quiet():
        iv = pv.IntervenableModel.load(str(directory), view)
    return adopt(iv)


# --------------------------------------------------------------------------- interchange

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


def interchange(iv, base: torch.Tensor, source: torch.Tensor | None = None, *,
                base_pos=None, source_pos=None, subspaces=None) -> torch.Tensor:
    """Run `base` (batch, pos) with the intervenable's site set from `source`; return logits.

    Sequence kinds: `base_pos` is required, one position (or `n_units` positions) per
    example; `source_pos` defaults to `base_pos`. State kind, `site_intervenable`: `base_pos`
    is each example's step, `source_pos` (default: the same) its source step. State kind,
    `intervenable` at one step: the base step is the intervenable's index, so `base_pos` may
    be omitted or must equal it for every example; `source_pos` (default: that step) picks
    each example's source step. `source=None` for
    interventions that need no source (zero, collect). `subspaces`: per-example lists of
    feature indices (in the intervention's basis), passed through to pyvene. Positions may
    be lists, numpy arrays or tensors. Gradients reach trainable interventions (DAS); the
    network itself is frozen. Returns (batch, pos, vocab).
    """
    adopt(iv)
    kind, index, n_units = iv.study_site
    batch = base.shape[0]
    if source is not None and source.shape[0] != batch:
        raise ValueError(f"source batch {source.shape[0]} != base batch {batch}")
    if getattr(iv, "study_steps", False):  # every example at its own step
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
    output: every position of a sequence kind, the step of a step kind. `iv`: an
    `intervenable` at one module. Returns logits (batch, pos, vocab), or with `readout`
    (batch, pos) bool only the True positions', (n_true, vocab)."""
    adopt(iv)
    _reset_fast(iv)
    if getattr(iv, "study_steps", False):
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


def _step_layers(iv, device) -> torch.Tensor:
    """(n_representations,) the step of each representation, in pyvene's key order, on
    `device` (made there once: the row masks are compared against it at every call)."""
    cached = getattr(iv, "_study_step_layers", None)
    if cached is None or cached.device != torch.device(device):
        cached = torch.tensor([int(iv.representations[k].layer) for k in iv.sorted_keys],
                              device=device)
        iv._study_step_layers = cached
    return cached


def interchange_vectors(iv, base: torch.Tensor, base_pos, sources: torch.Tensor, *,
                        readout: torch.Tensor | None = None) -> torch.Tensor:
    """Run `base` (batch, pos) through pyvene with each example's site vector at its position
    `base_pos[i]` intervened on against `sources[i]` (batch, width), vectors read beforehand
    (pyvene's `source_representations`; `study.models.sites.capture.gather_site` reads them).
    `iv`: a `site_intervenable` (the step kind: any step per example) or an `intervenable` at
    one module. Returns logits (batch, pos, vocab), or with `readout` (batch, pos) bool only
    the True positions', (n_true, vocab). Gradients reach trainable interventions."""
    adopt(iv)
    _reset_fast(iv)
    kind, index, n_units = iv.study_site
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
        if getattr(iv, "study_steps", False):
            layers = _step_layers(iv, pos.device)  # (n_steps,)
            merged = _one_intervention(iv)
            ctx, declared = _rows_at_own_steps(iv, kind, base_pos, merged)
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
