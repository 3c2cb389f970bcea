"""`site_intervenable`: a pyvene IntervenableModel at an analysis site where every example has
its own position (for the recurrent state: its own time step), with cached source vectors,
the scored-position readout, the row selection of our interventions, and pyvene's own
save/load. Plain forward hooks (`tests/models/hook_reference.py`) are the reference."""
from __future__ import annotations

import pytest
import torch

from study.analyses.das.alignment import LinearAlignment, OrthogonalAlignment
from study.models.sites import pyvene_bridge as ps
from study.models.sites import pyvene_run as pr
from study.models.sites.pyvene_interventions import (AblateIntervention, PatchIntervention,
                                                     WriteIntervention, gate_rows)
from study.models.sites.capture import gather_site, state_at
from tests.models.hook_reference import intervene, replace_fn
from tests.conftest import frozen_smoke_model, project_entries, step_loop


def _ids(model, batch, seed, n_pos=None):
    n_pos = n_pos or model.sites.kinds().get("state", 12)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 9, (batch, n_pos), generator=g)


def _alignment(cls, width, k, seed=0):
    torch.manual_seed(seed)
    inst = cls(width, k)
    inst.fit_standardisation(3 * torch.randn(64, width) + 1)
    return inst


@pytest.mark.parametrize("model_name", [n for n, e in project_entries("model").items()
                                        if "recurrent" in e.capabilities])
@pytest.mark.parametrize("cls", [OrthogonalAlignment, LinearAlignment])
def test_every_example_at_its_own_step_in_one_forward_equals_hooks(model_name, cls):
    _, model, _ = frozen_smoke_model("counting", model_name)
    base, source = _ids(model, 6, 1), _ids(model, 6, 2)
    bpos = torch.tensor([2, 5, 5, 9, 0, 11])  # several steps, one shared by two rows
    spos = torch.tensor([3, 1, 7, 9, 4, 2])
    src = state_at(model, source, spos.tolist())  # (6, width)
    inst = _alignment(cls, src.shape[1], 3)
    iv = ps.site_intervenable(model, "state", 0, inst)
    out = pr.interchange_vectors(iv, base, bpos, src)
    with intervene(model, "state", 0, bpos, lambda r, v: inst(v, src[r])):
        want = model(base)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(out, model(base), atol=1e-4)  # the intervention did something
    with step_loop(model):
        plain = model(base)
    # the clean prefix runs packed (each row to its own step), rounded differently
    for i, t in enumerate(bpos.tolist()):  # nothing changes before each row's own step
        torch.testing.assert_close(out[i, :t], plain[i:i + 1, :t][0], atol=1e-6, rtol=1e-5)
    # from source sequences: pyvene path (source states read per example) gives the same
    torch.testing.assert_close(pr.interchange_ids(iv, base, source, base_pos=bpos, source_pos=spos),
                               want, atol=1e-6, rtol=1e-6)


def test_gradients_through_the_cached_path_equal_the_hook_path():
    _, model, _ = frozen_smoke_model("counting", "gru")
    base = _ids(model, 5, 3)
    bpos = torch.tensor([1, 4, 4, 8, 10])
    src = torch.randn(5, model.d_state, generator=torch.Generator().manual_seed(0))
    grads = []
    for route in ("pyvene", "hooks"):
        inst = _alignment(OrthogonalAlignment, model.d_state, 2)
        if route == "pyvene":
            iv = ps.site_intervenable(model, "state", 0, inst)
            out = pr.interchange_vectors(iv, base, bpos, src)
        else:
            with intervene(model, "state", 0, bpos, lambda r, v: inst(v, src[r])):
                out = model(base)
        out[:, -1].square().sum().backward()
        grads.append(next(p.grad for p in inst.parameters() if p.requires_grad))
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_readout_returns_the_scored_positions_logits():
    _, model, _ = frozen_smoke_model("counting", "lstm")
    base = _ids(model, 4, 5)
    bpos = torch.tensor([3, 6, 2, 9])
    src = torch.randn(4, model.d_state, generator=torch.Generator().manual_seed(1))
    iv = ps.site_intervenable(model, "state", 0, _alignment(OrthogonalAlignment, model.d_state, 2))
    mask = torch.zeros(base.shape, dtype=torch.bool)
    mask[:, -3:] = True
    mask[0, 1] = True
    full = pr.interchange_vectors(iv, base, bpos, src)
    torch.testing.assert_close(pr.interchange_vectors(iv, base, bpos, src, readout=mask),
                               full[mask], atol=1e-6, rtol=1e-6)


@torch.no_grad()
def test_patching_one_head_through_pyvene_equals_a_hook():
    _, model, _ = frozen_smoke_model("binding", "rope2")
    base, source = _ids(model, 4, 1, n_pos=10), _ids(model, 4, 2, n_pos=10)
    width = model.site_kinds()[3].width
    pos = torch.tensor([2, 7, 9, 4])
    src = gather_site(model, source, "head", 1, pos)  # (4, width)
    d_head = width // model.n_heads
    feats = slice(0, d_head)
    iv = ps.site_intervenable(model, "head", 1, PatchIntervention(features=(0, d_head)))
    with intervene(model, "head", 1, pos, replace_fn(src[:, feats], feats)):
        want = model(base)
    got = pr.interchange_vectors(iv, base, pos, src)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(want, model(base), atol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("where", [("counting", "gru", "state", 0),
                                   ("binding", "rope2", "resid", 1)])
def test_writing_given_values_through_pyvene_equals_a_hook(where):
    """Stitching's write: each example's vector becomes write(vector, its value), the values
    (another width than the site's) handed to pyvene as source representations."""
    task_name, model_name, kind, layer = where
    _, model, _ = frozen_smoke_model(task_name, model_name)
    width = ps.register(model).config.__dict__[kind]
    P = torch.randn(2, width, generator=torch.Generator().manual_seed(4))
    write = lambda v, z: v + z @ P  # noqa: E731  (n, width), (n, 2) -> (n, width)
    base = _ids(model, 5, 8, n_pos=10)
    pos = torch.tensor([1, 4, 4, 9, 0])
    z = torch.randn(5, 2, generator=torch.Generator().manual_seed(5))
    iv = ps.site_intervenable(model, kind, layer, WriteIntervention(write=write))
    got = pr.interchange_vectors(iv, base, pos, z)
    with intervene(model, kind, layer, pos, lambda r, v: write(v, z[r])):
        want = model(base)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(got, model(base), atol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("mean", [False, True])
def test_ablating_a_head_at_every_position_through_pyvene_equals_a_hook(mean):
    """Head ablation runs a source-free intervention over the site's whole output; a plain
    hook that overwrites the head's features at every position is the reference."""
    _, model, _ = frozen_smoke_model("binding", "rope2")
    base = _ids(model, 4, 6, n_pos=10)
    width = ps.register(model).config.__dict__["head"]
    d_head = width // model.n_heads
    lo, hi = 0, d_head  # head 0
    values = torch.randn(12, width, generator=torch.Generator().manual_seed(6)) if mean else None

    def hook(_m, _a, out):  # (batch, pos, width)
        new = out.clone()
        new[..., lo:hi] = 0 if values is None else values[: out.shape[1], lo:hi]
        return new

    plain = model(base)
    handle = model.sites.head[1].register_forward_hook(hook)
    try:
        want = model(base)
    finally:
        handle.remove()
    iv = ps.module_intervenable(model, "head", 1,
                                AblateIntervention(features=(lo, hi), values=values))
    got = pr.run_sourceless(iv, base)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(got, plain, atol=1e-4)  # the head matters to the output
    mask = torch.zeros(base.shape, dtype=torch.bool)
    mask[:, -2:] = True
    torch.testing.assert_close(pr.run_sourceless(iv, base, readout=mask), want[mask],
                               atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(model(base), plain, atol=0, rtol=0)  # nothing left behind
    with pytest.raises(ValueError, match="needs a source"):
        pr.run_sourceless(ps.module_intervenable(model, "head", 1, PatchIntervention), base)


def test_row_selection_leaves_unselected_rows_exactly_alone():
    base, source = torch.randn(5, 4), torch.randn(5, 4)
    rows = torch.tensor([False, True, False, True, False])
    out = gate_rows(base, source, rows, lambda b, s: s * 2)
    assert torch.equal(out[~rows], base[~rows]) and torch.equal(out[rows], source[rows] * 2)
    assert gate_rows(base, source, torch.zeros(5, dtype=torch.bool), lambda b, s: s) is base
    with pytest.raises(ValueError, match="bool tensor"):
        gate_rows(base, source, [[0], [1]], lambda b, s: s)


def test_the_state_kind_refuses_an_intervention_that_cannot_select_rows():
    _, model, _ = frozen_smoke_model("counting", "gru")
    with pytest.raises(ValueError, match="which examples"):
        ps.site_intervenable(model, "state", 0, "vanilla")
    with pytest.raises(ValueError, match="one layer"):
        ps.site_intervenable(model, "state", 2, PatchIntervention)


@pytest.mark.parametrize("where", [("counting", "gru", "state", 0),
                                   ("binding", "rope2", "resid", 1)])
def test_pyvene_save_and_load_rebuild_the_same_intervenable(tmp_path, where):
    """pyvene's own format, loaded by pyvene alone (given the network): same logits; the
    loaded model is adopted (site read off its representations) and keeps the user's hooks."""
    task_name, model_name, kind, layer = where
    _, model, _ = frozen_smoke_model(task_name, model_name)
    width = ps.register(model).config.__dict__[kind]
    inst = _alignment(LinearAlignment, width, 3)
    iv = ps.site_intervenable(model, kind, layer, inst)
    base = _ids(model, 4, 7, n_pos=10)
    pos = torch.tensor([1, 4, 8, 9])
    src = torch.randn(4, width, generator=torch.Generator().manual_seed(3))
    want = pr.interchange_vectors(iv, base, pos, src)
    ps.save_intervenable(iv, tmp_path / "iv")
    loaded = ps.pyvene().IntervenableModel.load(str(tmp_path / "iv"), ps.register(model))
    calls = []
    handle = model.sites.__getattr__(kind)[layer].register_forward_hook(lambda *_: calls.append(1))
    try:
        got = pr.interchange_vectors(loaded, base, pos, src)
        assert calls  # the user's hook survived pyvene's clean-up
    finally:
        handle.remove()
    at = ps.where(loaded)
    assert (at.kind, at.layer, at.n_units) == (kind, layer, 1)
    assert all(type(i) is LinearAlignment for i in loaded.interventions.values())
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


class _TanhRecurrence(torch.nn.Module):
    """The state site receives a tanh's output, which autograd saves for backward."""

    def __init__(self, d=6, steps=5):
        super().__init__()
        from study.models.sites.modules import Sites
        self.embed = torch.nn.Embedding(9, d)
        self.w = torch.nn.Linear(d, d)
        self.sites = Sites(state=steps)
        self.capabilities = frozenset({"recurrent"})

    def forward(self, ids):
        h, out = torch.zeros(ids.shape[0], self.w.in_features), []
        for t in range(ids.shape[1]):
            h = self.sites.state[t](torch.tanh(self.embed(ids[:, t]) + self.w(h)))
            out.append(h)
        return torch.stack(out, 1)  # (batch, pos, d)


def test_a_site_fed_a_tensor_autograd_saved_trains_through_pyvene():
    """pyvene writes into the site's output in place; the site gets a copy of its input, so
    a tanh's saved output is never written to and gradients equal the hook path's."""
    model = _TanhRecurrence().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    base = torch.randint(0, 9, (4, 5), generator=torch.Generator().manual_seed(0))
    bpos, src = torch.tensor([0, 2, 2, 4]), torch.randn(4, 6)
    grads = []
    for route in ("pyvene", "hooks"):
        inst = _alignment(OrthogonalAlignment, 6, 2)
        if route == "pyvene":
            iv = ps.site_intervenable(model, "state", 0, inst)
            out = pr.interchange_vectors(iv, base, bpos, src)
        else:
            with intervene(model, "state", 0, bpos, lambda r, v: inst(v, src[r])):
                out = model(base)
        out.square().sum().backward()
        grads.append(next(p.grad for p in inst.parameters() if p.requires_grad))
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)
