"""The site vocabulary and its helpers on every registered family: identity swaps change
nothing, a patch equals a hand-written hook, patching state[t] moves t onward and nothing
before, reading helpers agree, hooks never outlive their block, and site choice/validation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from study.models.base import build_model
from study.core.sites import (KINDS, STEP_KINDS, check_site, default_sites, parse_site_key,
                              site_key, site_label)
from study.models.sites.capture import capture, collect, gather_site, hooked, site_widths
from tests.models.hook_reference import intervene, replace_fn
from study.models.sites.modules import Sites
from study.core.errors import UsageError
from study.core.registry import entries
from tests.conftest import project_entries, same_cuts

VOCAB, SEQ, BATCH = 11, 9, 4
FAMILIES = list(project_entries("model"))


def _model(name):
    entry = entries("model")[name]
    torch.manual_seed(0)
    return build_model(entry, entry.make_config("smoke"), VOCAB, SEQ).eval()


def _ids(seed):
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def _sites(model):
    """Every (kind, layer) site of the network that its forward runs."""
    with torch.no_grad(), capture(model, [(k, i) for k, n in model.sites.kinds().items()
                                          for i in range(1 if k in STEP_KINDS else n)]) as acts:
        model(_ids(0))
    return sorted(acts)


def _no_hooks(model):
    return all(not m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_identity_swap_at_every_site_changes_nothing(name):
    model = _model(name)
    ids, pos = _ids(1), torch.tensor([0, 3, 5, SEQ - 1])
    with same_cuts(model, pos):  # the clean run on the path an intervention takes, bit for bit
        clean = model(ids)
    for kind, layer in _sites(model):
        own = gather_site(model, ids, kind, layer, pos)  # (BATCH, width)
        with intervene(model, kind, layer, pos, replace_fn(own)):
            assert torch.equal(model(ids), clean), (kind, layer)
    assert _no_hooks(model)


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_a_patch_equals_a_hand_written_hook(name):
    model = _model(name)
    base, source, pos = _ids(1), _ids(2), torch.tensor([1, 4, 2, SEQ - 1])
    for kind, layer in _sites(model):
        values = gather_site(model, source, kind, layer, pos)  # (BATCH, width)
        with intervene(model, kind, layer, pos, replace_fn(values)):
            ours = model(base)
        rows = torch.arange(BATCH)
        if kind in STEP_KINDS:  # one module per step: row i is replaced at step pos[i]
            def put_at(t):
                def put(_m, _a, out):  # out (batch, width)
                    out = out.clone()
                    out[pos == t] = values[pos == t]
                    return out
                return put
            handles = [getattr(model.sites, kind)[t].register_forward_hook(put_at(t))
                       for t in pos.unique().tolist()]
        else:
            def put(_m, _a, out):  # out (batch, pos, width)
                out = out.clone()
                out[rows, pos] = values
                return out
            handles = [getattr(model.sites, kind)[layer].register_forward_hook(put)]
        try:
            theirs = model(base)
        finally:
            for h in handles:
                h.remove()
        assert torch.equal(ours, theirs), (kind, layer)
        assert not torch.equal(ours, model(base)), (kind, layer)


@pytest.mark.parametrize("name", [n for n in FAMILIES
                                  if "recurrent" in entries("model")[n].capabilities])
@torch.no_grad()
def test_patching_state_t_changes_later_steps_and_nothing_before(name):
    model, t = _model(name), 3
    ids = _ids(3)
    with capture(model, [("state", 0)]) as clean:
        clean_logits = model(ids)
    width = clean[("state", 0)].shape[-1]
    noise = torch.randn(BATCH, width, generator=torch.Generator().manual_seed(4)) * 3
    with capture(model, [("state", 0)]) as acts, \
            intervene(model, "state", 0, torch.full((BATCH,), t), replace_fn(noise)):
        logits = model(ids)
    states, before = acts[("state", 0)], clean[("state", 0)]  # (BATCH, SEQ, width)
    assert torch.equal(states[:, :t], before[:, :t])
    assert torch.equal(logits[:, :t], clean_logits[:, :t])
    assert (states[:, t + 1] - before[:, t + 1]).abs().amax() > 1e-4
    assert (logits[:, t] - clean_logits[:, t]).abs().amax() > 1e-4


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_reading_helpers_agree_with_each_other_and_the_shape_table(name):
    model = _model(name)
    ids = _ids(5)
    sites = _sites(model)
    with capture(model, sites) as acts:
        model(ids)
    arrays = collect(model, ids.numpy(), sites, "cpu", batch_size=3)
    assert sorted(arrays) == sites
    widths = site_widths(model)
    for site in sites:
        np.testing.assert_allclose(arrays[site], acts[site].numpy(), atol=1e-6)
        assert acts[site].shape == (BATCH, SEQ, widths[site[0]])
    pos = torch.tensor([0, 2, 4, 8])
    for kind, layer in sites:
        got = gather_site(model, ids, kind, layer, pos, batch_size=3)
        torch.testing.assert_close(got, acts[(kind, layer)][torch.arange(BATCH), pos])


def test_hooks_are_removed_when_the_block_raises():
    model = _model("gpt12")
    pos = torch.zeros(BATCH, dtype=torch.long)
    for block in (lambda: hooked(model, "resid", {0: lambda t: None}),
                  lambda: capture(model, [("resid", 1), ("head", 0)]),
                  lambda: intervene(model, "resid", 1, pos, lambda rows, v: v)):
        with pytest.raises(RuntimeError), block():
            raise RuntimeError
        assert _no_hooks(model)


def test_site_validation_and_the_choice_of_sites():
    gpt, gru = _model("gpt12"), _model("gru")  # smoke: 2 layers, 2 heads
    check_site(gpt, "resid", 2)
    check_site(gru, "state", 0)
    check_site(gru, "state", SEQ - 1, per_module=True)
    with pytest.raises(ValueError, match="no 'state' sites"):
        check_site(gpt, "state", 0)
    with pytest.raises(ValueError, match="out of range"):
        check_site(gpt, "head", 2)
    with pytest.raises(ValueError, match="one layer"):
        check_site(gru, "state", 3)

    assert default_sites(gpt) == [("resid", 0), ("resid", 1), ("resid", 2)]
    assert default_sites(gpt, heads=True)[-2:] == [("head", 0), ("head", 1)]
    assert default_sites(gpt, every_layer=False) == [("resid", 1)]
    assert default_sites(gpt, ("mlp_out",), (0,)) == [("mlp_out", 0)]
    assert default_sites(gru, heads=True) == default_sites(gru, ("state",), (0,)) == [("state", 0)]
    with pytest.raises(UsageError, match="das.sites: the model has no 'head' sites"):
        default_sites(gru, ("head",), setting="das")
    with pytest.raises(UsageError, match="x.layers=2: state sites have one layer"):
        default_sites(gru, (), (2,), setting="x")
    with pytest.raises(UsageError, match=r"resid\[5\] does not exist"):
        default_sites(gpt, ("resid",), (5,))


def test_sites_modules_take_only_known_kinds():
    sites = Sites(resid=3, state=2)
    assert sites.kinds() == {"resid": 3, "state": 2} and set(sites.kinds()) <= set(KINDS)
    with pytest.raises(ValueError, match="unknown site kinds"):
        Sites(residual=2)


def test_a_site_knows_its_hooks_by_the_handles_it_kept():
    """What a network asks before it skips a site (`Sites.hooked`, `hooked_steps`): the hooks
    on it now. One removed by its handle, or deleted by pyvene's clean-up, which empties the
    module's hook tables without a handle, is gone; one registered again is seen."""
    from study.models.sites.pyvene_loader import pyvene
    sites = Sites(state=3)
    read, pre = (lambda _m, _a, y: y), (lambda _m, _a: None)
    handle = sites.state[1].register_forward_hook(read)
    sites.state[2].register_forward_pre_hook(pre)
    assert [h for _, h in sites.state[1].hooks()] == [read] and sites.hooked("state")
    assert sites.hooked_steps("state", 3) == [1, 2] and sites.hooked_steps("state", 2) == [1]
    handle.remove()
    assert sites.state[1].hooks() == [] and sites.hooked_steps("state", 3) == [2]
    pyvene().models.modeling_utils.remove_forward_hooks(sites)
    assert not sites.hooked("state") and sites.hooked_steps("state", 3) == []
    sites.state[0].register_forward_hook(read)
    assert sites.hooked_steps("state", 3) == [0]
    with sites.only("state", [2]):  # a vouched hook outside the declared steps is skipped
        assert sites.hooked_steps("state", 3) == []


def test_a_site_is_written_one_way_and_read_back():
    """Table rows, saved alignment keys and chart labels all write a site the same way, and
    a saved key parses back to the site it names."""
    assert site_label("resid", 1) == "resid[1]" and site_label("state", 0) == "state"
    assert site_label("resid", 3, 17) == "resid[3]@17" and site_label("head", 2, -1) == "head[2]"
    assert site_key("resid", 1, -1) == "resid[1]@pair" and site_key("state", 0, -1) == "state@pair"
    assert site_key("resid", 3, 17) == "resid[3]@17"
    for kind in KINDS:
        layer = 0 if kind in STEP_KINDS else 2
        for position in (-1, 0, 9):
            assert parse_site_key(site_key(kind, layer, position)) == (kind, layer, position)
            assert parse_site_key(site_label(kind, layer, position)) == (kind, layer, position)
