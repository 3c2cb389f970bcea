"""The recurrent networks under pyvene: state interchanges and rotated subspaces that agree
with hand-written hooks, and sequence sites on a stub (pyvene's known traps)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from study.models.sites import pyvene_bridge as ps
from study.models.sites import pyvene_run as pr
from study.models.sites.capture import site_widths
from study.models.sites.modules import Sites
from tests.models.rnn_nets import CELLS, SEQ, hook_snapshot, smoke_net, states_of, token_ids


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch", [1, 5])
def test_pyvene_state_interchange_is_causal_and_equals_a_hook(cell, batch):
    model, t = smoke_net(cell), 4
    base, source = token_ids(batch, 6), token_ids(batch, 7)
    iv = ps.module_intervenable(model, "state", t, "vanilla")
    clean_logits, clean = states_of(model, base)
    _, src_states = states_of(model, source)
    # hooks registered before the call run (pyvene would have removed them) and, being
    # older than pyvene's, see each site before the intervention; the head sees the result
    seen = {}
    handles = [site.register_forward_hook(lambda _m, _a, y, i=i: seen.__setitem__(i, y.clone()))
               for i, site in enumerate(model.sites.state)]
    handles.append(model.head.register_forward_pre_hook(
        lambda _m, a: seen.__setitem__("head", a[0].clone())))
    try:
        with torch.no_grad():
            out = pr.interchange_ids(iv, base, source)
    finally:
        for h in handles:
            h.remove()
    states = torch.stack([seen[i] for i in range(SEQ)], dim=1)
    assert torch.equal(states[:, : t + 1], clean[:, : t + 1])
    assert (states[:, t + 1] - clean[:, t + 1]).abs().amax() > 1e-4
    H = model.d_hidden  # the head reads h, the first H features of the state [authors]
    assert torch.equal(seen["head"][:, :t], clean[:, :t, :H])
    assert torch.equal(seen["head"][:, t], src_states[:, t, :H])
    assert torch.equal(out[:, :t], clean_logits[:, :t])
    for p in range(t, SEQ):
        assert (out[:, p] - clean_logits[:, p]).abs().amax() > 1e-4
    # the same interchange by hand
    by_hook, _ = states_of(model, base, patch=(t, lambda y: src_states[:, t]))
    torch.testing.assert_close(out, by_hook, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_pyvene_identity_swap_changes_nothing(cell):
    model = smoke_net(cell)
    base = token_ids(5, 8)
    clean, _ = states_of(model, base)
    with torch.no_grad():
        out = pr.interchange_ids(ps.module_intervenable(model, "state", 2, "vanilla"), base, base)
        assert torch.equal(out, clean)
        rot = ps.module_intervenable(model, "state", 5, "rotated")
        torch.testing.assert_close(pr.interchange_ids(rot, base, base), clean, rtol=0, atol=1e-5)


def test_pyvene_state_source_from_other_steps_equals_a_hook():
    model, t = smoke_net("gru"), 5
    base, source = token_ids(5, 9), token_ids(5, 10)
    src_steps = [0, 2, 5, 7, 1]
    _, src_states = states_of(model, source)
    picked = src_states[torch.arange(5), torch.tensor(src_steps)]  # (5, d_state)
    want, _ = states_of(model, base, patch=(t, lambda y: picked))
    iv = ps.module_intervenable(model, "state", t, "vanilla")
    with torch.no_grad():
        out = pr.interchange_ids(iv, base, source, base_pos=[t] * 5, source_pos=src_steps)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="group examples by step"):
        pr.interchange_ids(iv, base, source, base_pos=[t, t, t, t, t - 1])
    with pytest.raises(ValueError, match="one integer"):
        pr.interchange_ids(iv, base, source, source_pos=2)


@pytest.mark.parametrize("cell", CELLS)
def test_pyvene_rotated_subspace_equals_a_hook_and_trains(cell):
    model, t = smoke_net(cell), 3
    base, source = token_ids(4, 13), token_ids(4, 14)
    iv = ps.module_intervenable(model, "state", t, "rotated")
    out = pr.interchange_ids(iv, base, source, source_pos=torch.tensor([0, 1, 2, 3]),
                             subspaces=[[0, 1]] * 4)
    (rotation,) = [p for p in iv.parameters() if p.requires_grad]  # the model is frozen
    out.logsumexp(-1).sum().backward()
    assert rotation.grad is not None and rotation.grad.abs().sum() > 0
    with torch.no_grad():
        R = list(iv.interventions.values())[0].rotate_layer.weight  # (d, d) orthogonal
        _, src_states = states_of(model, source)
        src = src_states[torch.arange(4), torch.arange(4)] @ R

        def swap(y):
            rot = y @ R
            rot[:, :2] = src[:, :2]
            return rot @ R.T

        want, _ = states_of(model, base, patch=(t, swap))
    torch.testing.assert_close(out.detach(), want, rtol=0, atol=1e-5)


def test_user_hooks_survive_pyvene_calls():
    model = smoke_net("lstm")
    calls = []
    model.sites.state[0].register_forward_hook(lambda *_: calls.append("state0"))
    model.head.register_forward_pre_hook(lambda *_: calls.append("head"))
    before = hook_snapshot(model)
    iv = ps.module_intervenable(model, "state", 3, "vanilla")
    base, source = token_ids(2, 11), token_ids(2, 12)
    with torch.no_grad():
        pr.interchange_ids(iv, base, source)
        iv({"input_ids": base}, [{"input_ids": source}])  # a direct call is guarded too
        pr.interchange_ids(iv, base, source, source_pos=[1, 6])
    assert hook_snapshot(model) == before  # user's hooks kept, none of pyvene's left
    calls.clear()
    with torch.no_grad():
        model(base)
    assert calls == ["state0", "head"]


# ----------------------------------------------------------------------------- pyvene, sequence sites

class _Stub(nn.Module):
    """Transformer-like: a residual stream with causal mixing and `sites.resid[l]`."""

    def __init__(self, vocab=11, d=6, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.ModuleList(nn.Linear(d, d) for _ in range(n_layers))
        self.sites = Sites(resid=n_layers + 1)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids)  # (batch, pos, d)
        pos = ids.shape[1]
        causal = torch.tril(torch.ones(pos, pos)) / torch.arange(1, pos + 1).unsqueeze(1)
        for layer, mix in enumerate(self.mix):
            x = self.sites.resid[layer](x)
            x = x + torch.tanh(mix(causal @ x))  # position p reads positions <= p
        return self.out(self.sites.resid[len(self.mix)](x))


def _stub_ids(batch, seed, pos=8):
    return torch.randint(0, 11, (batch, pos), generator=torch.Generator().manual_seed(seed))


def _hook_interchange(model, layer, base, source, bpos, spos):
    grab = {}
    h = model.sites.resid[layer].register_forward_hook(lambda _m, _a, y: grab.__setitem__(0, y.clone()))
    with torch.no_grad():
        model(source)
    h.remove()

    def put(_m, _a, y):
        y = y.clone()
        for i, (bp, sp) in enumerate(zip(bpos, spos)):
            y[i, bp] = grab[0][i, sp]
        return y

    h = model.sites.resid[layer].register_forward_hook(put)
    with torch.no_grad():
        out = model(base)
    h.remove()
    return out


def test_stub_widths_are_probed():
    assert site_widths(_Stub()) == {"resid": 6}


@pytest.mark.parametrize("n_units", [1, 2])
def test_stub_per_example_interchange_equals_a_hook(n_units):
    torch.manual_seed(0)
    model = _Stub().eval()
    base, source = _stub_ids(4, 1), _stub_ids(4, 2)
    bpos = [[1, 3], [6, 0], [2, 5], [7, 4]]
    spos = [[5, 2], [0, 7], [3, 3], [1, 6]]
    bpos, spos = [p[:n_units] for p in bpos], [p[:n_units] for p in spos]
    want = _hook_interchange(model, 1, base, source, bpos, spos)
    iv = ps.module_intervenable(model, "resid", 1, "vanilla", n_units=n_units)
    with torch.no_grad():
        out = pr.interchange_ids(iv, base, source, base_pos=bpos, source_pos=spos)
        clean = model(base)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    assert (out - clean).abs().amax() > 1e-3  # the patch did something


def test_stub_identity_swap_changes_nothing():
    torch.manual_seed(0)
    model = _Stub().eval()
    base = _stub_ids(3, 3)
    with torch.no_grad():
        clean = model(base)
        for name in ("vanilla", "rotated"):
            iv = ps.module_intervenable(model, "resid", 2, name)
            out = pr.interchange_ids(iv, base, base, base_pos=[[0], [4], [7]])
            torch.testing.assert_close(out, clean, rtol=0, atol=1e-5)


def test_stub_sticky_fast_mode_is_reset():
    torch.manual_seed(0)
    model = _Stub().eval()
    base, source = _stub_ids(3, 4), _stub_ids(3, 5)
    iv = ps.module_intervenable(model, "resid", 1, "vanilla")
    with torch.no_grad():
        iv({"input_ids": base}, [{"input_ids": source}], unit_locations={"sources->base": 2})
    assert iv.use_fast  # pyvene's trap is armed by one integer location
    bpos, spos = [[1], [6], [3]], [[4], [0], [7]]
    with torch.no_grad():
        out = pr.interchange_ids(iv, base, source, base_pos=bpos, source_pos=spos)
    torch.testing.assert_close(out, _hook_interchange(model, 1, base, source, bpos, spos),
                               rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="fast mode"):
        pr.interchange_ids(iv, base, source, base_pos=3)


def test_bridge_rejects_bad_sites():
    model = _Stub()
    with pytest.raises(ValueError, match="no 'state' sites"):
        ps.module_intervenable(model, "state", 0)
    with pytest.raises(ValueError, match="out of range"):
        ps.module_intervenable(model, "resid", 3)
    with pytest.raises(ValueError, match="embed_dim"):
        ps.module_intervenable(model, "resid", 0, ps.pyvene().VanillaIntervention(embed_dim=5))
