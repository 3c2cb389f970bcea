"""The recurrent families: sizes, the authors' parameters, exact cells against torch's, the
free-running loss, and causal state sites."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from study.models.base import build_model
from study.models.nets.rnn import RecurrentLM
from study.models.sites.capture import site_widths
from study.models.rnn import GRUConfig, LSTMConfig, RNNConfig
from study.core.errors import UsageError
from study.core.registry import SCALES, get
from tests.models.rnn_nets import CELLS, SEQ, VOCAB, smoke_net, states_of, token_ids


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
    model = smoke_net(cell)
    ids = token_ids(3, 1)
    logits, states = states_of(model, ids)
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
    model = RecurrentLM(GRUConfig(d_embed=5, d_hidden=6, d_mlp=8), VOCAB, SEQ).eval()
    ref = nn.GRU(5, 6, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, f"{name}_l0").copy_(getattr(model.cell, name))
    ids = token_ids(4, 2)
    logits, states = states_of(model, ids)
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
    model = smoke_net(cell, seed=3)
    ids = token_ids(6, 11)
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
    model = RecurrentLM(LSTMConfig(d_embed=5, d_hidden=4, d_mlp=8), VOCAB, SEQ).eval()
    ref = nn.LSTM(5, 4, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, f"{name}_l0").copy_(getattr(model.cell, name))
    ids = token_ids(4, 3)
    _, states = states_of(model, ids)
    with torch.no_grad():
        h, (_, c_last) = ref(model.embed(ids))
    torch.testing.assert_close(states[..., :4], h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(states[:, -1, 4:], c_last[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch", [1, 5])
def test_patching_state_t_changes_t_onward_and_nothing_before(cell, batch):
    model, t = smoke_net(cell), 3
    ids = token_ids(batch, 4)
    clean_logits, clean = states_of(model, ids)
    patch = torch.randn(batch, clean.shape[-1], generator=torch.Generator().manual_seed(5)) * 3
    logits, states = states_of(model, ids, patch=(t, lambda y: patch))
    assert torch.equal(states[:, :t], clean[:, :t])
    assert torch.equal(logits[:, :t], clean_logits[:, :t])
    assert torch.equal(states[:, t], patch)
    for p in range(t + 1, SEQ):  # every later state and logit moves
        assert (states[:, p] - clean[:, p]).abs().amax() > 1e-4
    for p in range(t, SEQ):
        assert (logits[:, p] - clean_logits[:, p]).abs().amax() > 1e-4
