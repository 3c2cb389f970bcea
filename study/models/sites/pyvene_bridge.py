"""The one place our networks meet pyvene: site registration and intervenable models.

Every network exposes its intervention sites as identity modules under `model.sites`
(`study/models/sites/modules.py`). This module makes them addressable by pyvene under the site-kind names
(`study.core.sites.KINDS`: `"resid"`, `"attn_out"`, `"mlp_out"`, `"head"`, `"state"`);
`study/models/sites/pyvene_run.py` runs interchange interventions through the intervenables
built here, on per-example aligned positions (`interchange_ids`, `interchange_vectors`,
`run_sourceless`).

    iv = module_intervenable(model, "state", 7, "rotated")   # DAS at the state after token 7
    logits = interchange_ids(iv, base_ids, source_ids)        # (batch, pos, vocab)
    iv = module_intervenable(model, "resid", 1, "vanilla")    # patch the stream entering layer 1
    logits = interchange_ids(iv, base_ids, source_ids, base_pos=[[3], [5]],
                             source_pos=[[4], [2]])
    iv = site_intervenable(model, "state", 0, alignment)      # every example at its own step
    logits = interchange_ids(iv, base_ids, source_ids, base_pos=[3, 5], source_pos=[4, 2])
    logits = interchange_vectors(iv, base_ids, [3, 5], source_vectors)  # sources read once

    iv = module_intervenable(model, "head", 1, AblateIntervention(features=(0, 4)))
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

What the library knows of an intervenable (where it acts, the position its pairs are judged
at, how `study.iia` scores it) is one value, a `Placement` (`study/models/sites/placement.py`),
kept in this module's one weak store: read with `where(iv)`, changed with `place(iv, position)`
and `judge_with(iv, batch_size, outputs)`. Nothing is set on pyvene's objects.

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

pyvene 0.1.8 traps guarded here (each has a test in tests/models/test_rnn_pyvene.py):
- Every `IntervenableModel` call removes *every* forward and pre-forward hook on the wrapped
  model, a user's too (`_cleanup_states` -> `remove_forward_hooks`). `module_intervenable`
  (`_guard`) replaces that clean-up on the instance with one that removes only pyvene's own
  hooks, so hooks you registered survive any call (also one made directly, not through
  `interchange_ids`). Do not
  use `IntervenableModel.train_alignment`, which calls the hook-wiping function directly.
- One integer location (`unit_locations={"base": 3}` or a flat list) switches the instance
  to "fast" mode for good; afterwards only the first example's location is used for the
  whole batch. `interchange_ids` only ever passes per-example nested lists, rejects bare ints,
  and resets the instance's fast flags before each call.
- pyvene's per-timestep unit `"t"` for recurrent models is wrong at every batch size; our
  recurrent networks are unrolled with one `state[t]` site per step instead, and the state
  kind is addressed as an ordinary module per step (no `"t"` unit).
- Models pyvene does not know must carry `.config` and `.device` (pyvene reads both);
  `PyveneView` provides them instead of asking every network to.
- Building an `IntervenableModel` freezes the model (`requires_grad=False` on every
  parameter) and puts it in eval mode. That is what an analysis wants (dropout off, only the
  intervention trains), and we keep it; a training loop must not share the instance.
- pyvene clears the dict passed as `source_representations` after a call; `interchange_ids`
  builds a fresh one each time.
- `save_intervention`/`load_intervention` map to `cuda:0`: use `IntervenableModel.save` and
  the static `IntervenableModel.load(directory, register(model))` instead; `save_intervenable` and
  `load_intervenable` call them with pyvene's prints ("Directory ... created", "... already
  exists") and root-logger warnings ("The key is provided in the config ...", logged by every
  load) kept off stdout and stderr (`study/models/quiet.py`). Custom intervention classes must
  live in an importable module to load (pyvene saves their type names). A loaded model
  wipes hooks again; `interchange_ids` and `interchange_vectors` adopt it (`adopt`).
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

import dataclasses
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from study.core.errors import UsageError
from study.core.sites import KINDS, STEP_KINDS, check_site
from study.models.sites.capture import device_of, site_widths
from study.models.sites.placement import Placement
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


def _drop_pyvene_hooks(sites) -> None:
    """Remove the hooks pyvene registered on `sites` (the `Site`s it hooks), through the
    handles each site keeps, and leave every other hook in place."""
    own = pyvene().models.intervenable_base.__name__  # where pyvene's hook callbacks live
    for site in sites:
        for handle, hook in site.hooks():
            if getattr(hook, "__module__", None) == own:
                handle.remove()


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


def module_intervenable(model: nn.Module, kind: str, index: int, intervention: Any = "vanilla",
                        *, n_units: int = 1, **intervention_kwargs):
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
    _PLACEMENTS[iv] = Placement(kind, index, n_units)
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
    iv._remove_forward_hooks = lambda: _drop_pyvene_hooks(hooked)
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


def site_intervenable(model: nn.Module, kind: str, layer: int, intervention: Any = "patch"):
    """A `pyvene.IntervenableModel` acting at the analyses' site `(kind, layer)`, each
    example at its own position (`interchange_vectors`, `interchange_ids`).

    Sequence kinds: `module_intervenable(model, kind, layer, intervention)`, one
    representation at `sites.<kind>[layer]`. The step kind (layer 0): one representation per
    time step t at `sites.state[t]`, every one holding the same intervention instance, which
    must take a row selection as `subspaces` (`study/models/sites/pyvene_interventions.py`; the
    DAS alignments and `PatchIntervention` do). `intervention`: "patch" (`PatchIntervention`, the vanilla
    interchange), a pyvene intervention class (built with the site's width) or an instance.
    """
    check_site(model, kind, layer)
    if isinstance(intervention, str) and intervention == "patch":
        from study.models.sites.pyvene_interventions import PatchIntervention
        intervention = PatchIntervention
    if kind not in STEP_KINDS:
        return module_intervenable(model, kind, layer, intervention)
    pv = pyvene()
    view = register(model)
    inst = _make_intervention(intervention, view.config.__dict__[kind], {})
    if not getattr(inst, "takes_row_mask", False):
        raise ValueError(f"{type(inst).__name__} cannot be told which examples to intervene "
                         f"on at each step (study/models/sites/pyvene_interventions.py); the {kind} "
                         f"kind needs that, or module_intervenable(model, {kind!r}, step, ...) "
                         f"for one step")
    reps = [pv.RepresentationConfig(layer=t, component=kind, unit="pos", max_number_of_units=1,
                                    intervention=inst)
            for t in range(model.sites.kinds()[kind])]
    with quiet():
        iv = pv.IntervenableModel(pv.IntervenableConfig(representations=reps), view,
                                  use_fast=False)
    _guard(iv)
    _PLACEMENTS[iv] = _per_step(iv, kind, layer)
    return iv


def _per_step(iv, kind: str, layer: int) -> Placement:
    """The placement of an intervenable with one representation per step of `kind`."""
    steps = tuple(int(iv.representations[k].layer) for k in iv.sorted_keys)
    return Placement(kind, layer, 1, per_step=True, steps=steps)


# The one store of what the library knows of an intervenable (`Placement`): intervenable ->
# its placement; weak, so an intervenable dropped is forgotten here too. Read and changed
# only through `where`, `place` and `judge_with` (and set when built or adopted here).
_PLACEMENTS: "weakref.WeakKeyDictionary[Any, Placement]" = weakref.WeakKeyDictionary()


def where(iv) -> Placement:
    """Where `iv` acts and how it is judged (an intervenable built here, or one
    `IntervenableModel.load` rebuilt over our sites, adopted on first sight)."""
    adopt(iv)
    return _PLACEMENTS[iv]


def place(iv, position: int):
    """`iv`, judged from now on at the pairs' token `position`. Returns iv."""
    _PLACEMENTS[iv] = dataclasses.replace(where(iv), position=int(position))
    return iv


def judge_with(iv, batch_size: int, outputs):
    """`iv`, scored by `study.iia` from now on `batch_size` pairs per forward pass, right and
    wrong over the output ids of `outputs` (a task, its `Outputs`, or None: every token),
    unless the call says otherwise. Returns iv."""
    _PLACEMENTS[iv] = dataclasses.replace(where(iv), batch_size=int(batch_size),
                                          outputs=outputs)
    return iv


def adopt(iv):
    """Record where an `IntervenableModel` over our sites that this module did not build (one
    that `IntervenableModel.load` rebuilt) acts, and guard the user's hooks. Returns iv."""
    if iv in _PLACEMENTS:
        return iv
    reps = list(iv.representations.values())
    kinds = {r.component for r in reps}
    if len(kinds) != 1 or not kinds <= set(KINDS) or not isinstance(iv.model, PyveneView):
        raise ValueError("not an intervenable over one site kind of a study network (built by "
                         "site_intervenable or module_intervenable, or loaded onto "
                         "register(model))")
    kind = reps[0].component
    if kind in STEP_KINDS and len(reps) > 1:
        placement = _per_step(iv, kind, 0)
    elif len(reps) == 1:
        placement = Placement(kind, int(reps[0].layer), int(reps[0].max_number_of_units))
    else:
        raise ValueError(f"an intervenable with {len(reps)} {kind} representations: one is "
                         f"expected (or one per step of the state kind)")
    _guard(iv)
    _PLACEMENTS[iv] = placement
    return iv


def save_intervenable(iv, directory) -> None:
    """pyvene's own `IntervenableModel.save` into `directory` (made if missing), quietly.
    `load_intervenable(directory, model)` (or pyvene's `IntervenableModel.load(directory,
    register(model))`) reads it."""
    with quiet():
        iv.save(str(directory))


def load_intervenable(directory, model: nn.Module):
    """The `pyvene.IntervenableModel` saved in `directory` by `IntervenableModel.save` (the
    das analysis writes them under RUN/analyses/das/pyvene/), rebuilt over `model`'s sites:
    pyvene's own `IntervenableModel.load(directory, register(model))`, quietly, adopted
    (`adopt`) so `interchange_ids`, `interchange_vectors` and `study.iia` take it as it is.

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
