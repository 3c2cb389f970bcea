"""The network contract: every registered family builds a network that satisfies `Network`
and offers what its declared capabilities promise; unknown capability names are refused; a
network that breaks a promise is refused when built."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from study.models.base import build_model
from study.models.sites.modules import Sites
from study.core.errors import UsageError
from study.core.network import (CAPABILITIES, ContractError, check_network, checked_builder,
                                declared_kinds, require)
from study.core.sites import KINDS, SiteKind
from study.core.registry import entries, register
from tests.conftest import project_entries

VOCAB, SEQ = 13, 10


def _built(name):
    entry = entries("model")[name]
    torch.manual_seed(0)
    return entry, build_model(entry, entry.make_config("smoke"), VOCAB, SEQ)


@pytest.mark.parametrize("name", list(project_entries("model")))
def test_every_family_builds_a_network_that_keeps_its_promises(name):
    entry, model = _built(name)
    assert model.capabilities == entry.capabilities and entry.capabilities <= CAPABILITIES.keys()
    check_network(model)  # the registry ran it too; it must hold for the network as returned
    assert set(model.sites.kinds()) <= set(KINDS)
    kinds = {k.name: k for k in model.site_kinds()}
    if "heads" in model.capabilities:
        assert model.n_heads >= 1 and kinds["head"].width % model.n_heads == 0
    if "residual" in model.capabilities:
        assert kinds["resid"].count == model.n_layers + 1
    # the site kinds an analysis may ask for are read off the declared capabilities before
    # any network is built (`check_sites`): they must be the built network's kinds
    assert set(declared_kinds(entry.capabilities)) == set(model.sites.kinds())
    if "recurrent" in model.capabilities:
        assert "state" in kinds
    if "attention" in model.capabilities:
        from study.models.nets.attention import capture_attention

        with torch.no_grad(), capture_attention(model) as patterns:
            model(torch.zeros(1, 3, dtype=torch.long))
        assert len(patterns) == model.n_layers
        assert all(p.shape[1] == model.n_heads for p in patterns)
    else:
        assert model.n_heads == 0
    if "learned_positions" in model.capabilities:
        with pytest.raises(ValueError):
            model(torch.zeros(1, SEQ + 1, dtype=torch.long))
    out = model(torch.zeros(2, SEQ, dtype=torch.long))
    assert out.shape == (2, SEQ, VOCAB)
    mask = torch.zeros(2, SEQ, dtype=torch.bool)
    mask[:, -1] = True
    assert model(torch.zeros(2, SEQ, dtype=torch.long), readout=mask).shape == (2, VOCAB)


def test_the_families_declare_the_capabilities_the_analyses_rely_on():
    caps = {name: e.capabilities for name, e in entries("model").items()}
    assert caps["attn2"] == {"attention", "heads", "residual", "weights_view",
                             "learned_positions"}
    assert caps["gpt12"] == caps["rope2"] == {"attention", "heads", "residual"}
    assert caps["gru"] == caps["lstm"] == {"recurrent"}
    for name, e in entries("analysis").items():
        assert e.requires <= CAPABILITIES.keys(), name


# ----------------------------------------------------------------------------- registration

@dataclasses.dataclass(frozen=True)
class _Cfg:
    d: int = 4


def test_registration_refuses_an_unknown_capability_name():
    with pytest.raises(ValueError, match="unknown capabilities"):
        register("model", "never_registered", config=_Cfg, capabilities=("attention", "telepathy"))
    with pytest.raises(ValueError, match="unknown capabilities"):
        register("analysis", "never_registered", config=_Cfg, requires=("head",))
    with pytest.raises(ValueError, match="only models"):
        register("analysis", "never_registered", config=_Cfg, capabilities=("heads",))
    assert "never_registered" not in entries("model")
    assert "never_registered" not in entries("analysis")


# ----------------------------------------------------------------------------- broken promises

class _Tiny(nn.Module):
    """A minimal network meeting the contract: resid, attn_out, mlp_out and head sites, two
    heads of width 2."""

    def __init__(self, head_width: int = 4, n_heads: int = 2, resid: int = 2, extra_kind=None):
        super().__init__()
        self.n_layers, self.n_heads = 1, n_heads
        self.embed = nn.Embedding(5, 4)
        counts = {"resid": resid, "attn_out": 1, "mlp_out": 1, "head": 1}
        self.sites = Sites(**counts)
        self.table = [SiteKind("resid", resid, 4), SiteKind("attn_out", 1, 4),
                      SiteKind("mlp_out", 1, 4), SiteKind("head", 1, head_width)]
        if extra_kind:
            self.table.append(SiteKind(extra_kind, 1, 4))

    def site_kinds(self) -> list[SiteKind]:
        return list(self.table)

    def forward(self, ids, readout=None):
        x = self.embed(ids)  # (batch, pos, 4)
        x = self.sites.resid[0](x) + self.sites.head[0](x)
        x = self.sites.resid[1](x)
        return x if readout is None else x[readout]


def _build(**kwargs):
    return lambda config, vocab_size, seq_len: _Tiny(**kwargs)


def test_a_checked_builder_sets_the_capabilities_and_accepts_a_network_that_keeps_them():
    build = checked_builder(_build(), ("heads", "residual", "attention"))
    model = build(None, 5, 3)
    assert model.capabilities == frozenset({"heads", "residual", "attention"})
    require(model, "heads", "residual")
    with pytest.raises(UsageError, match="recurrent"):
        require(model, "recurrent")


@pytest.mark.parametrize("kwargs,caps,match", [
    ({}, ("recurrent",), "no 'state' sites"),  # promises a kind it lacks
    ({"head_width": 5}, ("heads",), "do not split into n_heads=2"),
    ({"n_heads": 0}, ("attention",), "at least one head"),
    ({"resid": 3}, ("residual",), "n_layers \\+ 1"),
    ({}, ("learned_positions",), "lacks W_pos, seq_len"),
    ({}, ("weights_view",), "lacks W_E, W_pos, W_U, blocks"),
    ({"extra_kind": "state"}, (), "does not match its sites"),  # shape table vs sites
])
def test_a_network_that_breaks_a_promise_is_refused_when_built(kwargs, caps, match):
    with pytest.raises(ContractError, match=match):
        checked_builder(_build(**kwargs), caps)(None, 5, 3)


def test_a_network_missing_part_of_the_contract_is_refused():
    class NoHeads(_Tiny):
        def __init__(self):
            super().__init__()
            del self.n_heads

    class NoReadout(_Tiny):
        def forward(self, ids):
            return super().forward(ids)

    with pytest.raises(ContractError, match="lacks n_heads"):
        checked_builder(lambda *a: NoHeads(), ())(None, 5, 3)
    with pytest.raises(ContractError, match="readout"):
        checked_builder(lambda *a: NoReadout(), ())(None, 5, 3)
    with pytest.raises(ValueError, match="unknown capabilities"):
        checked_builder(_build(), ("heads", "mlp"))


def test_weights_view_promises_every_block_its_matrices():
    entry = entries("model")["attn2"]

    def build(config, vocab_size, seq_len):
        model = entry.obj(config, vocab_size, seq_len)
        del model.blocks[1].attn.W_O
        return model

    with pytest.raises(ContractError, match=r"blocks\[1\] lack attn.W_O"):
        checked_builder(build, entry.capabilities)(entry.make_config("smoke"), VOCAB, SEQ)
