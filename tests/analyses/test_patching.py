"""Activation patching: hooks that change nothing when they should not, agreement with
pyvene, the batched sweep against a one-site-at-a-time brute force, and the tables."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from study.analyses.common.context import AnalysisContext
from study.analyses.common.interchange import all_right, logit_diff, pair_tensors
from study.analyses.patching.sweep import sweep, tables
from study.models.sites.pyvene_bridge import module_intervenable
from study.models.sites.pyvene_run import interchange_ids
from study.models.sites.capture import capture
from tests.models.hook_reference import intervene, replace_fn
from study.core.registry import get
from tests.conftest import frozen_smoke_model as _smoke


def _as_if_answered(pt):
    """`pt` judged as though the network answered every base right: every changed pair is
    tested. The untrained smoke networks answer few bases, so their own judgement would leave
    no pair to score; the engine's arithmetic is the same for any judgement."""
    return replace(pt, base_right=torch.ones(len(pt), dtype=torch.bool), tests=pt.changed)


@pytest.fixture
def answered(monkeypatch):
    """The analysis judges its pairs with `_as_if_answered` instead of the network."""
    import study.analyses.patching.sweep as engine
    monkeypatch.setattr(engine, "judged", lambda model, pt, batch_size=512: _as_if_answered(pt))


def _acts(model, ids, sites):
    with torch.no_grad(), capture(model, sites) as acts:
        logits = model(ids)
    return acts, logits


# ----------------------------------------------------------------------------- no-op patches

@pytest.mark.parametrize("model_name,kind,layer,feats", [
    ("gpt12", "resid", 1, None), ("gpt12", "head", 0, slice(16, 32)), ("gru", "state", 0, None)])
def test_patching_a_site_with_the_bases_own_activation_changes_nothing(model_name, kind, layer,
                                                                       feats):
    task, model, _ = _smoke("counting", model_name)
    ids = torch.as_tensor(task.split("test").ids[:5]).long()
    acts, plain = _acts(model, ids, [(kind, layer)])
    a = acts[(kind, layer)]  # (5, pos, width)
    pos = torch.tensor([1, 3, 4, 7, 9])
    values = a[torch.arange(5), pos][:, feats if feats is not None else slice(None)]
    with torch.no_grad(), intervene(model, kind, layer, pos, replace_fn(values, feats)):
        patched = model(ids)
    assert torch.equal(patched, plain)
    # and the hook really acts: another row's vector changes the outputs from pos on
    with torch.no_grad(), intervene(model, kind, layer, pos, replace_fn(values.flip(0), feats)):
        moved = model(ids)
    assert torch.equal(moved[0, :1], plain[0, :1]) and not torch.allclose(moved, plain)


def test_patching_with_a_source_equal_to_the_base_changes_nothing():
    task, model, _ = _smoke("binding", "gpt12")
    pairs = task.counterfactuals("root_value", 6, split="test", seed=0)
    pairs = replace(pairs, source_ids=pairs.base_ids.copy())
    pt = _as_if_answered(pair_tensors(pairs, "cpu"))
    acc, ref = sweep(model, pt, [("resid", 0), ("resid", 2), ("head", 1)], 2, batch_size=4)
    df = tables(acc, ref, "root_value", True, 0)
    flips = {(r["site"], r["metric"]): r["value"] for r in df}
    base_flip = [r["value"] for r in df if r["site"] == "none"][0]
    assert all(r["value"] == base_flip for r in df if r["metric"] == "flip_rate")
    assert all(abs(r["value"]) < 1e-6 for r in df if r["metric"] == "logit_diff")
    assert ("resid", "flip_rate") in flips


# ----------------------------------------------------------------------------- pyvene

def test_hook_patches_equal_pyvene_interchanges():
    task, model, _ = _smoke("binding", "gpt12")
    pairs = task.counterfactuals("query", 4, split="test", seed=1)
    base, src = (torch.as_tensor(a).long() for a in (pairs.base_ids, pairs.source_ids))
    bpos, spos = torch.tensor([10, 30, 50, 66]), torch.tensor([12, 30, 2, 66])
    acts, _ = _acts(model, src, [("resid", 1), ("head", 1)])
    with torch.no_grad():
        for kind, feats in (("resid", None), ("head", slice(16, 32))):
            values = acts[(kind, 1)][torch.arange(4), spos]
            fs = feats if feats is not None else slice(None)
            with intervene(model, kind, 1, bpos, replace_fn(values[:, fs], feats)):
                ours = model(base)
            iv = module_intervenable(model, kind, 1, "vanilla")
            sub = None if feats is None else [list(range(16, 32))] * 4
            theirs = interchange_ids(iv, base, src, base_pos=bpos.tolist(),
                                     source_pos=spos.tolist(), subspaces=sub)
            assert torch.allclose(ours, theirs, atol=1e-5), kind
    _, gru, _ = _smoke("counting", "gru")
    ids = torch.as_tensor(task.split("test").ids[:3, :20]).long() % 9
    other = ids.flip(0)
    acts, _ = _acts(gru, other, [("state", 0)])
    with torch.no_grad():
        with intervene(gru, "state", 0, torch.full((3,), 6), replace_fn(acts[("state", 0)][:, 6])):
            ours = gru(ids)
        theirs = interchange_ids(module_intervenable(gru, "state", 6, "vanilla"), ids, other)
    assert torch.allclose(ours, theirs, atol=1e-5)


# ----------------------------------------------------------------------------- the sweep

def _brute(model, pt, kind, layer, pos, feats):
    """One patched forward of every pair at one site, full length, no skipping."""
    n = len(pt)
    aligned = pt.aligned
    acts, _ = _acts(model, pt.source_ids, [(kind, layer)])
    a = acts[(kind, layer)]
    spos = torch.full((n,), pos) if aligned else pt.source_pos
    bpos = torch.full((n,), pos) if aligned else pt.base_pos
    fs = feats if feats is not None else slice(None)
    with torch.no_grad(), intervene(model, kind, layer, bpos,
                                    replace_fn(a[torch.arange(n), spos][:, fs], feats)):
        logits = model(pt.base_ids)
    ld, ok = logit_diff(logits, pt.cf_labels, pt.base_labels)
    return all_right(logits, pt.cf_labels, pt.outputs).float().mean().item(), ld, ok


def test_batched_sweep_equals_brute_force_on_aligned_pairs():
    task, model, _ = _smoke("binding", "gpt12")
    pt = pair_tensors(task.counterfactuals("root_value", 5, split="test", seed=2), "cpu")
    tested = torch.tensor([True, False, True, True, False])  # the LD is over tested pairs
    pt = replace(pt, base_right=tested, tests=tested)
    acc, ref = sweep(model, pt, [("resid", 1), ("head", 0)], 2, batch_size=3)
    checked = 0
    for (kind, layer, head, pos), (f, n, ld_sum, n_ld, _, _, _) in acc.sums.items():
        if pos % 9 and pos != 66:  # a spread of positions, incl. the answer's
            continue
        feats = None if head < 0 else slice(16 * head, 16 * head + 16)
        flip, ld, ok2 = _brute(model, pt, kind, layer, pos, feats)
        assert f / n == pytest.approx(flip)
        assert ld_sum / n_ld == pytest.approx(ld[ok2 & tested].mean().item(), abs=1e-4)
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize("model_name,site", [("rope2", ("resid", 1)), ("gru", ("state", 0))])
def test_batched_sweep_equals_brute_force_on_pairs_with_explicit_positions(model_name, site):
    task, model, _ = _smoke("counting", model_name)
    pt = _as_if_answered(
        pair_tensors(task.counterfactuals("up_down:count", 7, split="test", seed=0), "cpu"))
    assert not pt.aligned
    acc, ref = sweep(model, pt, [site], 1, batch_size=3)
    (key, (f, n, ld_sum, n_ld, _, _, _)), = acc.sums.items()
    assert key == (*site, -1, -1)
    flip, ld, ok = _brute(model, pt, *site, None, None)
    assert f / n == pytest.approx(flip)
    assert ld_sum / n_ld == pytest.approx(ld[ok & pt.tested].mean().item(), abs=1e-4)


# ----------------------------------------------------------------------------- the analysis

def test_patching_analysis_tables_and_the_final_stream_sanity_check(tmp_path, answered):
    task, model, entry = _smoke("binding", "gpt12")
    cfg = replace(get("analysis", "patching").make_config("smoke"), n_pairs=6,
                  kinds=("root_value", "distractor"))
    ctx = AnalysisContext(model, task, cfg, "gpt12", 3, torch.device("cpu"),
                          tmp_path)
    out = get("analysis", "patching").obj(ctx)
    df, ranking = out["patching"], out["head_ranking"]
    assert list(df.columns) == ["checkpoint", "site", "layer", "position", "head",
                                "counterfactual", "metric", "value", "value_all", "n_pairs",
                                "n_changed", "n_tested"]
    assert set(df["site"]) == {"none", "resid", "head"}
    assert (df.loc[df["site"] == "resid", "head"] == -1).all()
    assert set(df.loc[df["site"] == "head", "head"]) == {0, 1}
    assert set(df.loc[df["site"] == "resid", "layer"]) == {0, 1, 2}  # n_layers + 1 streams
    # patching the final stream at the answer position hands over the source's whole answer
    final = df[(df["site"] == "resid") & (df["layer"] == 2) & (df["position"] == 66)
               & (df["counterfactual"] == "root_value") & (df["metric"] == "norm_logit_diff")]
    assert final["value"].item() == pytest.approx(1.0, abs=1e-4)
    assert list(ranking.columns) == ["checkpoint", "counterfactual", "metric", "layer", "head",
                                     "value", "rank"]
    # root_value: flip_gain and logit_diff; distractor keeps the answer, so no pair of it
    # changes the output: no flip rate on tested pairs (value NaN, value_all kept) and no
    # logit difference, hence no ranking
    assert ranking.groupby(["counterfactual", "metric"]).size().to_dict() == {
        ("root_value", "flip_gain"): 4, ("root_value", "logit_diff"): 4}
    distractor = df[(df["counterfactual"] == "distractor") & (df["metric"] == "flip_rate")]
    assert distractor["value"].isna().all() and distractor["value_all"].between(0, 1).all()
    assert (distractor["n_changed"] == 0).all() and (distractor["n_pairs"] == 6).all()
    assert (distractor["n_tested"] == 0).all()
    assert sorted(ranking.groupby(["counterfactual", "metric"])["rank"].apply(list).iloc[0]) == \
        [1, 2, 3, 4]


def test_patching_analysis_on_a_recurrent_model_patches_every_step(tmp_path, answered):
    task, model, entry = _smoke("binding", "gru")
    cfg = replace(get("analysis", "patching").make_config("smoke"), n_pairs=4,
                  kinds=("query",))
    ctx = AnalysisContext(model, task, cfg, "gru", 0, torch.device("cpu"),
                          tmp_path)
    out = get("analysis", "patching").obj(ctx)
    df = out["patching"]
    steps = df.loc[(df["site"] == "state") & (df["metric"] == "flip_rate"), "position"]
    assert sorted(steps) == list(range(67)) and out["head_ranking"].empty
    # patching the last step hands over the source's whole state, so its whole answer
    last = df[(df["site"] == "state") & (df["position"] == 66) & (df["metric"] == "norm_logit_diff")]
    assert last["value"].item() == pytest.approx(1.0, abs=1e-4)
    assert np.isfinite(df["value"]).all() and (df["n_changed"] == 4).all()


def test_flip_rate_counts_tested_pairs_and_value_all_every_pair():
    """The flip rate's `value` is over the tested pairs only, `value_all` over all pairs, and
    every row carries both the causal model's changed count and the tested count."""
    task, model, _ = _smoke("counting", "gru")
    pairs = task.counterfactuals("up_down:count", 12, split="test", seed=0)
    pt = pair_tensors(pairs, "cpu")
    changed = pt.changed.numpy()
    tested = pt.changed & (torch.arange(12) % 3 != 0)  # a judgement leaving some changed out
    pt = replace(pt, base_right=tested, tests=tested)
    acc, ref = sweep(model, pt, [("state", 0)], 1, batch_size=5)
    (f, n, _, _, ft, nt, nc), = acc.sums.values()
    df = tables(acc, ref, "up_down:count", False, 0)
    flip = [r for r in df if r["site"] == "state" and r["metric"] == "flip_rate"][0]
    assert nc == changed.sum() and nt == tested.sum() < nc and n == 12
    assert flip["value"] == pytest.approx(ft / nt) and flip["value_all"] == pytest.approx(f / n)
    assert flip["n_pairs"] == 12 and flip["n_changed"] == changed.sum()
    assert flip["n_tested"] == tested.sum()


def test_a_patch_the_network_ignores_flips_no_tested_pair():
    """A toy network misreads some bases (wrong answer, on some pairs the counterfactual one)
    and never reads the patched site. The patching sweep judges the pairs on the network
    itself: the misread and unchanged pairs are not tested, so the patch's flip rate on the
    tested pairs is 0 (as is the unpatched base's), though the patch "flips" some pairs."""
    from tests.analyses.test_das_scoring import Misreading, expected_judgement, mixed_pairs

    model = Misreading().eval()
    pairs = mixed_pairs(300, 1, 0.3)
    base_right, tests, noop_right = expected_judgement(pairs)
    acc, ref = sweep(model, pair_tensors(pairs, "cpu"), [("resid", 0)], 1, batch_size=64)
    df = tables(acc, ref, "v", True, 0)
    flips = [r for r in df if r["metric"] == "flip_rate"]
    assert {r["site"] for r in flips} == {"none", "resid"}
    for r in flips:
        assert r["value"] == 0.0 and r["value_all"] == pytest.approx(noop_right.mean()), r
        assert r["n_tested"] == tests.sum() < r["n_changed"] == pairs.changed.sum()
    assert noop_right[pairs.changed].any()  # on changed pairs a no-op would have scored
