"""The recurrent families and the pyvene bridge: sizes, exact cells, causal state sites,
and interchanges that agree with hand-written hooks (pyvene's known traps)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from study.models.base import build_model
from study.models.sites import pyvene_bridge as ps
from study.models.sites import pyvene_run as pr
from study.models.nets.rnn import RecurrentLM
from study.models.sites.capture import site_widths
from study.models.sites.modules import Sites
from study.models.rnn import GRUConfig, LSTMConfig, RNNConfig
from study.core.errors import UsageError
from study.core.registry import SCALES, get
from tests.conftest import project_entries

VOCAB, SEQ = 7, 9
CELLS = [n for n, e in project_entries("model").items() if "recurrent" in e.capabilities]


def _model(cell: str, seed: int = 0) -> RecurrentLM:
    torch.manual_seed(seed)
    config = get("model", cell).make_config("smoke")
    return build_model(get("model", cell), config, VOCAB, SEQ).eval()


def _ids(batch: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, SEQ), generator=g)  # (batch, SEQ)


def _states(model, ids, patch=None):
    """Logits and every state site's output; `patch` = (t, fn) replaces state[t]'s output."""
    seen = {}
    handles = []
    for t, site in enumerate(model.sites.state):
        def hook(_m, _a, y, t=t):
            if patch is not None and patch[0] == t:
                y = patch[1](y)
            seen[t] = y.detach().clone()
            return y
        handles.append(site.register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for h in handles:
            h.remove()
    return logits, torch.stack([seen[t] for t in range(ids.shape[1])], dim=1)  # (b, pos, d)


def _hook_snapshot(model):
    return [(name, dict(m._forward_hooks), dict(m._forward_pre_hooks))
            for name, m in model.named_modules()]


# ----------------------------------------------------------------------------- families

@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("scale", SCALES)
def test_param_count_is_the_built_networks(cell, scale):
    entry = get("model", cell)
    config = entry.make_config(scale)
    model = build_model(entry, config, VOCAB, SEQ)
    assert config.param_count(VOCAB, SEQ) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("cell", CELLS)
def test_smoke_entry_runs_and_offers_a_state_site_per_token(cell):
    entry = get("model", cell)
    model = _model(cell)
    ids = _ids(3, 1)
    logits, states = _states(model, ids)
    assert logits.shape == (3, SEQ, VOCAB)
    d_state = entry.make_config("smoke").d_state
    assert states.shape == (3, SEQ, d_state)
    assert model.sites.kinds() == {"state": SEQ}
    assert site_widths(model) == {"state": d_state}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids)
    assert out.shape == (3, SEQ, VOCAB) and torch.isfinite(out.float()).all()


def test_paper_configs_and_validation():
    assert (GRUConfig().d_hidden, GRUConfig().d_state) == (128, 128)
    assert (LSTMConfig().d_hidden, LSTMConfig().d_state) == (64, 128)
    assert get("model", "lstm").make_config("paper") == LSTMConfig()
    assert get("model", "gru").make_config("small") == GRUConfig()
    with pytest.raises(UsageError, match="model.cell"):
        get("model", "gru").make_config("paper", {"cell": "lstm"})
    with pytest.raises(UsageError, match="model.dropout"):
        RNNConfig(dropout=1.5)
    with pytest.raises(UsageError, match="model.d_hidden"):
        LSTMConfig(d_hidden=0)


def test_gru_matches_torch_gru():
    torch.manual_seed(0)
    model = RecurrentLM(RNNConfig(cell="gru", d_embed=5, d_hidden=6, d_mlp=8), VOCAB, SEQ).eval()
    ref = nn.GRU(5, 6, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, f"{name}_l0").copy_(getattr(model.cell, name))
    ids = _ids(4, 2)
    logits, states = _states(model, ids)
    with torch.no_grad():
        want, _ = ref(model.embed(ids))
        torch.testing.assert_close(states, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(logits, model.head(want), rtol=1e-5, atol=1e-6)


def _authors_rnn(cell: str, vocab: int) -> nn.Module:
    """The authors' module shapes (`grantsrb/mas/seq_models.py`, `dl_utils/seq_models.py`,
    d_model 128, h_mult 4, drop_p 0.5, l_norm off): embedding, one cell, decoder
    Linear -> GELU -> Dropout, lm_head Linear."""
    d_model = 128
    if cell == "gru":
        rnn, d_out = nn.GRUCell(d_model, d_model), d_model
    else:
        rnn, d_out = nn.LSTMCell(d_model, d_model // 2), d_model // 2
    return nn.ModuleDict({
        "embeddings": nn.Embedding(vocab, d_model), "rnn": rnn,
        "decoder": nn.Sequential(nn.Linear(d_out, 4 * d_model), nn.GELU(), nn.Dropout(0.5)),
        "lm_head": nn.Linear(4 * d_model, vocab)})


@pytest.mark.parametrize("cell", CELLS)
def test_paper_networks_have_the_authors_parameters(cell):
    entry = get("model", cell)
    config = entry.make_config("paper")
    model = build_model(entry, config, 9, 43)
    ours = {n: p.numel() for n, p in model.named_parameters()}
    theirs = _authors_rnn(cell, 9)
    assert sum(ours.values()) == sum(p.numel() for p in theirs.parameters())
    assert config.param_count(9, 43) == sum(ours.values())
    assert model.head[0].in_features == theirs["decoder"][0].in_features  # h alone
    assert model.head[2].p == theirs["decoder"][2].p == 0.5


def _hand_rolled_free_loss(model, ids, targets, feed):
    """The authors' loop (`grantsrb/mas/seq_models.py` RNN.forward): at each step the input
    is the true token, or, where the task mask is set, the embedding of the previous step's
    argmax; cross entropy over the scored targets."""
    cell, H = model.cell, model.d_hidden
    h = torch.zeros(ids.shape[0], H)
    c = torch.zeros(ids.shape[0], H)
    logits, pred = [], None
    for t in range(ids.shape[1]):
        x = model.embed(ids[:, t]).clone()
        if t > 0 and feed[:, t].any():
            x[feed[:, t]] = model.embed(pred[feed[:, t]])
        if model.is_lstm:
            h, c = cell(x, (h, c))
        else:
            h = cell(x, h)
        out = model.head(h)
        pred = out.argmax(-1)
        logits.append(out)
    logits = torch.stack(logits, 1)
    mask = targets != -1
    return nn.functional.cross_entropy(logits[mask], targets[mask]), logits


@pytest.mark.parametrize("cell", CELLS)
def test_free_running_loss_equals_a_hand_rolled_loop(cell):
    model = _model(cell, seed=3)
    ids = _ids(6, 11)
    targets = torch.full_like(ids, -1)
    targets[:, 3:7] = ids[:, 4:8]  # scored positions 3..6: inputs 4..7 are the model's own
    feed = torch.zeros_like(ids, dtype=torch.bool)
    feed[:, 1:] = targets[:, :-1] != -1
    want, want_logits = _hand_rolled_free_loss(model, ids, targets, feed)
    got_logits = model(ids, feed=feed)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-6)
    got = model(ids, readout=targets != -1, feed=feed)
    loss = nn.functional.cross_entropy(got, targets[targets != -1])
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    # the fed positions really differ from teacher forcing on a random network
    assert not torch.allclose(model(ids)[:, 4:8], got_logits[:, 4:8])
    # gradients flow through the fed embeddings into the weights, as in the authors' loop
    loss.backward()
    assert model.embed.weight.grad is not None


def test_lstm_matches_torch_lstm():
    torch.manual_seed(0)
    model = RecurrentLM(RNNConfig(cell="lstm", d_embed=5, d_hidden=4, d_mlp=8), VOCAB, SEQ).eval()
    ref = nn.LSTM(5, 4, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, f"{name}_l0").copy_(getattr(model.cell, name))
    ids = _ids(4, 3)
    _, states = _states(model, ids)
    with torch.no_grad():
        h, (_, c_last) = ref(model.embed(ids))
    torch.testing.assert_close(states[..., :4], h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(states[:, -1, 4:], c_last[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch", [1, 5])
def test_patching_state_t_changes_t_onward_and_nothing_before(cell, batch):
    model, t = _model(cell), 3
    ids = _ids(batch, 4)
    clean_logits, clean = _states(model, ids)
    patch = torch.randn(batch, clean.shape[-1], generator=torch.Generator().manual_seed(5)) * 3
    logits, states = _states(model, ids, patch=(t, lambda y: patch))
    assert torch.equal(states[:, :t], clean[:, :t])
    assert torch.equal(logits[:, :t], clean_logits[:, :t])
    assert torch.equal(states[:, t], patch)
    for p in range(t + 1, SEQ):  # every later state and logit moves
        assert (states[:, p] - clean[:, p]).abs().amax() > 1e-4
    for p in range(t, SEQ):
        assert (logits[:, p] - clean_logits[:, p]).abs().amax() > 1e-4


# ----------------------------------------------------------------------------- pyvene, state

@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch", [1, 5])
def test_pyvene_state_interchange_is_causal_and_equals_a_hook(cell, batch):
    model, t = _model(cell), 4
    base, source = _ids(batch, 6), _ids(batch, 7)
    iv = ps.intervenable(model, "state", t, "vanilla")
    clean_logits, clean = _states(model, base)
    _, src_states = _states(model, source)
    # hooks registered before the call run (pyvene would have removed them) and, being
    # older than pyvene's, see each site before the intervention; the head sees the result
    seen = {}
    handles = [site.register_forward_hook(lambda _m, _a, y, i=i: seen.__setitem__(i, y.clone()))
               for i, site in enumerate(model.sites.state)]
    handles.append(model.head.register_forward_pre_hook(
        lambda _m, a: seen.__setitem__("head", a[0].clone())))
    try:
        with torch.no_grad():
            out = pr.interchange(iv, base, source)
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
    by_hook, _ = _states(model, base, patch=(t, lambda y: src_states[:, t]))
    torch.testing.assert_close(out, by_hook, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_pyvene_identity_swap_changes_nothing(cell):
    model = _model(cell)
    base = _ids(5, 8)
    clean, _ = _states(model, base)
    with torch.no_grad():
        out = pr.interchange(ps.intervenable(model, "state", 2, "vanilla"), base, base)
        assert torch.equal(out, clean)
        rot = ps.intervenable(model, "state", 5, "rotated")
        torch.testing.assert_close(pr.interchange(rot, base, base), clean, rtol=0, atol=1e-5)


def test_pyvene_state_source_from_other_steps_equals_a_hook():
    model, t = _model("gru"), 5
    base, source = _ids(5, 9), _ids(5, 10)
    src_steps = [0, 2, 5, 7, 1]
    _, src_states = _states(model, source)
    picked = src_states[torch.arange(5), torch.tensor(src_steps)]  # (5, d_state)
    want, _ = _states(model, base, patch=(t, lambda y: picked))
    iv = ps.intervenable(model, "state", t, "vanilla")
    with torch.no_grad():
        out = pr.interchange(iv, base, source, base_pos=[t] * 5, source_pos=src_steps)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="group examples by step"):
        pr.interchange(iv, base, source, base_pos=[t, t, t, t, t - 1])
    with pytest.raises(ValueError, match="one integer"):
        pr.interchange(iv, base, source, source_pos=2)


@pytest.mark.parametrize("cell", CELLS)
def test_pyvene_rotated_subspace_equals_a_hook_and_trains(cell):
    model, t = _model(cell), 3
    base, source = _ids(4, 13), _ids(4, 14)
    iv = ps.intervenable(model, "state", t, "rotated")
    out = pr.interchange(iv, base, source, source_pos=torch.tensor([0, 1, 2, 3]),
                         subspaces=[[0, 1]] * 4)
    (rotation,) = [p for p in iv.parameters() if p.requires_grad]  # the model is frozen
    out.logsumexp(-1).sum().backward()
    assert rotation.grad is not None and rotation.grad.abs().sum() > 0
    with torch.no_grad():
        R = list(iv.interventions.values())[0].rotate_layer.weight  # (d, d) orthogonal
        _, src_states = _states(model, source)
        src = src_states[torch.arange(4), torch.arange(4)] @ R

        def swap(y):
            rot = y @ R
            rot[:, :2] = src[:, :2]
            return rot @ R.T

        want, _ = _states(model, base, patch=(t, swap))
    torch.testing.assert_close(out.detach(), want, rtol=0, atol=1e-5)


def test_user_hooks_survive_pyvene_calls():
    model = _model("lstm")
    calls = []
    model.sites.state[0].register_forward_hook(lambda *_: calls.append("state0"))
    model.head.register_forward_pre_hook(lambda *_: calls.append("head"))
    before = _hook_snapshot(model)
    iv = ps.intervenable(model, "state", 3, "vanilla")
    base, source = _ids(2, 11), _ids(2, 12)
    with torch.no_grad():
        pr.interchange(iv, base, source)
        iv({"input_ids": base}, [{"input_ids": source}])  # a direct call is guarded too
        pr.interchange(iv, base, source, source_pos=[1, 6])
    assert _hook_snapshot(model) == before  # user's hooks kept, none of pyvene's left
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
    iv = ps.intervenable(model, "resid", 1, "vanilla", n_units=n_units)
    with torch.no_grad():
        out = pr.interchange(iv, base, source, base_pos=bpos, source_pos=spos)
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
            iv = ps.intervenable(model, "resid", 2, name)
            out = pr.interchange(iv, base, base, base_pos=[[0], [4], [7]])
            torch.testing.assert_close(out, clean, rtol=0, atol=1e-5)


def test_stub_sticky_fast_mode_is_reset():
    torch.manual_seed(0)
    model = _Stub().eval()
    base, source = _stub_ids(3, 4), _stub_ids(3, 5)
    iv = ps.intervenable(model, "resid", 1, "vanilla")
    with torch.no_grad():
        iv({"input_ids": base}, [{"input_ids": source}], unit_locations={"sources->base": 2})
    assert iv.use_fast  # pyvene's trap is armed by one integer location
    bpos, spos = [[1], [6], [3]], [[4], [0], [7]]
    with torch.no_grad():
        out = pr.interchange(iv, base, source, base_pos=bpos, source_pos=spos)
    torch.testing.assert_close(out, _hook_interchange(model, 1, base, source, bpos, spos),
                               rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="fast mode"):
        pr.interchange(iv, base, source, base_pos=3)


def test_bridge_rejects_bad_sites():
    model = _Stub()
    with pytest.raises(ValueError, match="no 'state' sites"):
        ps.intervenable(model, "state", 0)
    with pytest.raises(ValueError, match="out of range"):
        ps.intervenable(model, "resid", 3)
    with pytest.raises(ValueError, match="embed_dim"):
        ps.intervenable(model, "resid", 0, ps.pyvene().VanillaIntervention(embed_dim=5))


# ----------------------------------------------------------------------------- fused kernel

def _step_loop(model):
    """A global no-op module hook (watches every module call): the network must then run its
    step loop. Returns the handle."""
    from torch.nn.modules.module import register_module_forward_hook

    return register_module_forward_hook(lambda _m, _a, y: None)


def _grads(model, logits):
    model.zero_grad()
    (logits ** 2).mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("cell", CELLS)
def test_with_no_site_hooked_the_fused_kernel_runs_and_equals_the_step_loop(cell, monkeypatch):
    model = _model(cell, seed=5)
    ids = _ids(5, 4)
    handle = _step_loop(model)
    want = model(ids)
    want_grads = _grads(model, want)
    handle.remove()

    def no_loop(*_a, **_k):
        raise AssertionError("the step loop ran with no site hooked")

    monkeypatch.setattr(model, "_step", no_loop)
    got = model(ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    got_grads = _grads(model, got)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_free_running_by_fused_fixed_point_passes_equals_the_step_loop(cell, monkeypatch):
    import study.models.nets.rnn as rnn

    monkeypatch.setattr(rnn, "SETTLE_PASSES", SEQ)  # a random network needs many passes
    monkeypatch.setattr(rnn, "FUSED_FREE_DEVICES", ("cpu", "cuda"))  # the GPU path, here
    model = _model(cell, seed=3)
    ids = _ids(6, 11)
    feed = torch.zeros_like(ids, dtype=torch.bool)
    feed[:, 4:8] = True
    handle = _step_loop(model)
    want = model(ids, feed=feed)
    want_grads = _grads(model, want)
    handle.remove()
    assert model._free_fused(ids, feed, None) is not None  # settled: the fused path is taken
    got = model(ids, feed=feed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for name, g in _grads(model, got).items():
        torch.testing.assert_close(g, want_grads[name], rtol=1e-4, atol=1e-6)
    # a batch that does not settle within the passes falls back to the loop, same result
    monkeypatch.setattr(rnn, "SETTLE_PASSES", 1)
    assert model._free_fused(ids, feed, None) is None
    torch.testing.assert_close(model(ids, feed=feed), want, rtol=1e-5, atol=1e-6)


def test_a_hooked_state_site_sees_every_step():
    model = _model("gru")
    calls = []
    handle = model.sites.state[3].register_forward_hook(lambda _m, _a, y: calls.append(1))
    model(_ids(2, 0))
    handle.remove()
    assert len(calls) == 1 and not model.sites.hooked("state")


def _as_one_block(model: RecurrentLM) -> None:
    """Make the cell's weights views of one block, as cuDNN's flattening leaves them on CUDA."""
    cell = model.cell
    weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
    block = torch.cat([w.detach().flatten() for w in weights])
    offset = 0
    with torch.no_grad():
        for w in weights:
            w.set_(block.untyped_storage(), offset, w.shape)
            offset += w.numel()


@pytest.mark.parametrize("cell", CELLS)
def test_a_checkpoint_of_weights_in_one_block_is_written_and_read_back(cell, tmp_path):
    from study.train import checkpoint as ckpt

    model = _model(cell, seed=3)
    _as_one_block(model)
    ids = _ids(4, 1)
    want = model(ids)
    path = ckpt.save(tmp_path, 7, model, {"what": "test"}, None)
    other = _model(cell, seed=4)
    _as_one_block(other)
    block = other.cell.weight_ih.untyped_storage().data_ptr()
    ckpt.load_weights(other, path)
    torch.testing.assert_close(other(ids), want, rtol=0, atol=0)
    # read in place: the weights are still views of their one block
    assert other.cell.bias_hh.untyped_storage().data_ptr() == block


@pytest.mark.gpu
@pytest.mark.parametrize("cell", CELLS)
def test_on_cuda_the_fused_kernel_reads_its_weights_without_a_copy_or_a_warning(cell):
    import warnings

    model = _model(cell).cuda()
    cell_ = model.cell
    blocks = {w.untyped_storage().data_ptr()
              for w in (cell_.weight_ih, cell_.weight_hh, cell_.bias_ih, cell_.bias_hh)}
    assert len(blocks) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "not part of single contiguous chunk of memory"
        model(_ids(3, 0).cuda())
