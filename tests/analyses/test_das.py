"""DAS: alignment functions (OAF, LAF, random control), the cached-source loop through pyvene
against pyvene's source-forward path and plain hooks, recovery of a planted causal variable
(the test that catches silent failures), and the alignments saved in pyvene's format."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from study.analyses.das.alignment import (LinearAlignment, OrthogonalAlignment,
                                    RotatedLinearAlignment, load_alignment, pv, random_oaf)
from study.analyses.das.search import forward, search, site_data
from study.analyses.common.interchange import pair_tensors, with_base_states
from study.analyses.das.update import scored_iv
from study.models.sites.pyvene_bridge import site_intervenable
from study.analyses.common.context import AnalysisContext
from study.analyses.das import DasConfig
from study.models.sites.pyvene_bridge import module_intervenable
from study.models.sites.pyvene_run import interchange_ids
from tests.models.hook_reference import intervene
from study.models.sites.modules import Sites
from study.core.registry import get
from tests.conftest import frozen_smoke_model as _smoke, same_cuts
from study.tasks.base import Pairs



# ----------------------------------------------------------------------------- planted model

D, C, M = 12, 4, 6  # site width, classes of the variable, nuisance values


class Planted(nn.Module):
    """Token (v, w) -> h = Q [c_v ; n_w] at site resid[0]; the output reads only Q[:, :2]^T h,
    so the variable v lives in a known 2-dim subspace (span of Q[:, :2]) of the site."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(D, D, generator=g))
        angle = 2 * math.pi * torch.arange(C) / C
        self.register_buffer("protos", 3 * torch.stack([angle.cos(), angle.sin()], 1))  # (C, 2)
        self.register_buffer("nuis", 3 * torch.randn(M, D - 2, generator=g))  # (M, D - 2)
        codes = torch.cat([self.protos.repeat_interleave(M, 0), self.nuis.repeat(C, 1)], 1)
        self.register_buffer("emb", codes @ q.T)  # (C*M, D); token id = v*M + w
        self.register_buffer("q", q)
        self.register_buffer("qv", q[:, :2])
        self.sites = Sites(resid=1)

    def forward(self, ids):
        h = self.sites.resid[0](self.emb[ids])  # (batch, pos, D)
        r = h @ self.qv  # (batch, pos, 2)
        return -((r[..., None, :] - self.protos) ** 2).sum(-1)  # (batch, pos, C)


def planted_pairs(n, seed):
    """Base v_b, source v_s != v_b, independent nuisances; the cf answer is v_s."""
    rng = np.random.default_rng(seed)
    vb, vs = rng.integers(C, size=n), rng.integers(C, size=n)
    vs = np.where(vs == vb, (vb + 1) % C, vs)
    base = (vb * M + rng.integers(M, size=n))[:, None]
    source = (vs * M + rng.integers(M, size=n))[:, None]
    aligned = np.full(n, -1)
    return Pairs("v", base, source, vb[:, None], vs[:, None], aligned, aligned.copy(),
                 {"value": vs})


def test_das_recovers_a_planted_two_dim_variable_and_the_random_control_does_not(tmp_path):
    model = Planted().eval()
    data = site_data(model, planted_pairs(512, 0), planted_pairs(256, 1), "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(2,), steps=400, batch_size=64, lr=1e-2, n_train=512, n_test=256,
                    alignments=("oaf", "laf", "random"), laf_form="sd")
    rows, saved = search(model, data, "v", -1, cfg, seed=0, checkpoint=0)
    test = {r["alignment"]: r["iia"] for r in rows if r["split"] == "test"}
    assert test["oaf"] >= 0.95 and test["laf"] >= 0.95, test
    assert test["random"] <= 0.5, test  # a wrong 2-dim subspace: about chance (1/C) or below
    # the saved tensors rebuild alignments that act exactly like the trained ones
    path = tmp_path / "alignments.safetensors"
    save_file(saved, str(path))
    sub = data.test.take(slice(0, 64))
    with torch.no_grad():
        for name in ("oaf", "laf"):
            inst = load_alignment(path, f"{name}/v/resid[0]@pair/k=2")
            right = (forward(model, data, inst, sub, data.src_test[:64]).argmax(-1)[:, 0]
                     == sub.cf_labels[:, 0]).float().mean()
            assert right >= 0.95


def test_a_plateau_stops_training_and_a_learnable_variable_is_still_found():
    """`patience` ends a search that cannot improve (k=1 cannot carry the 2-dim variable: a
    single direction holds at most part of it) long before `steps`, and leaves k=2 intact."""
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.loop import Member, train
    from study.analyses.das.search import iia

    model = Planted().eval()
    data = site_data(model, planted_pairs(512, 0), planted_pairs(256, 1), "resid", 0, -1, "cpu")
    done = {}
    for k in (1, 2):
        inst = make_alignment("oaf", D, k, seed=k)
        inst.fit_standardisation(data.fit_acts)
        done[k] = train(model, data, [Member(inst, seed=0, lr=1e-2)], steps=3000,
                        batch_size=64, stop_iia=0.995, patience=60)[0]
        done[k, "iia"] = iia(model, data, inst, "test")
    assert done[1] < 1000 and done[1, "iia"] < 0.9, done  # plateaued, stopped early
    assert done[2, "iia"] >= 0.95, done


# ----------------------------------------------------------------------------- alignments

def _laf_identity(d, k):
    laf = LinearAlignment(d, k)
    with torch.no_grad():  # M M^T + 0.1 I = I, column signs +1 (tanh(u) + 0.1 = 1), bias 0
        laf.core.copy_(math.sqrt(0.9) * torch.eye(d))
        laf.signs.fill_(math.atanh(0.9))
    return laf


def test_laf_with_the_identity_map_is_a_plain_interchange_of_the_first_k_dims():
    laf = _laf_identity(8, 3)
    assert torch.allclose(laf.matrix(), torch.eye(8), atol=1e-6)
    g = torch.Generator().manual_seed(0)
    base, source = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    out = laf(base, source)
    assert torch.allclose(out, torch.cat([source[:, :3], base[:, 3:]], 1), atol=1e-6)


def test_laf_inverse_is_exact_and_a_self_interchange_changes_nothing():
    torch.manual_seed(1)
    laf = LinearAlignment(16, 4)
    with torch.no_grad():
        laf.bias.normal_()
    laf.fit_standardisation(3 * torch.randn(200, 16) + 1)
    w, w_inv = laf.maps()
    assert (w @ w_inv - torch.eye(16)).abs().max() < 1e-5
    x = torch.randn(7, 16)
    assert (laf(x, x) - x).abs().max() < 1e-5
    assert 1 < laf.condition_number() < 1e4


def test_laf_refuses_an_ill_conditioned_map():
    model = Planted().eval()
    data = site_data(model, planted_pairs(32, 0), planted_pairs(16, 1), "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(2,), steps=0, alignments=("laf", "laf_sd"), laf_form="sd",
                    max_cond=1.001)  # the authors' random start: cond(A) > 1
    with pytest.warns(UserWarning, match="cond"):
        rows, _ = search(model, data, "v", -1, cfg, seed=0, checkpoint=0)
    assert all(math.isnan(r["iia"]) for r in rows)


def test_oaf_is_pyvenes_rotated_space_intervention_inside_the_standardisation():
    oaf = OrthogonalAlignment(6, 2)
    ref = pv.RotatedSpaceIntervention(embed_dim=6)
    ref.set_interchange_dim(2)
    with torch.no_grad():
        ref.rotate_layer.weight = oaf.matrix().detach()
    g = torch.Generator().manual_seed(0)
    base, source = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    assert torch.allclose(oaf(base, source), ref(base.clone(), source.clone()), atol=1e-6)
    w = random_oaf(6, 2, seed=3).matrix()
    assert torch.allclose(w @ w.T, torch.eye(6), atol=1e-5)
    assert not any(p.requires_grad for p in random_oaf(6, 2, seed=3).parameters())


class PlantedPair(Planted):
    """Planted, but the output names (v, w): logit[v * M + w] reads both the variable's plane
    span(Q[:, :2]) and the nuisance in its orthogonal complement, so an interchange must
    move exactly that plane: an orthogonal projection, which the authors' LAF form only
    approximates."""

    def forward(self, ids):
        h = self.sites.resid[0](self.emb[ids]) @ self.q  # (batch, pos, D), Q's coordinates
        dv = -((h[..., None, :2] - self.protos) ** 2).sum(-1)  # (batch, pos, C)
        dn = -((h[..., None, 2:] - self.nuis) ** 2).sum(-1)  # (batch, pos, M)
        return (dv[..., :, None] + dn[..., None, :]).flatten(-2)  # (batch, pos, C * M)


def pair_pairs(n, seed):
    """As planted_pairs, with the (v, w) label: the counterfactual keeps the base's w."""
    p = planted_pairs(n, seed)
    rng = np.random.default_rng(seed + 1)
    wb, ws = rng.integers(M, size=n), rng.integers(M, size=n)
    vb, vs = p.base_labels[:, 0], p.cf_labels[:, 0]
    base, source = (vb * M + wb)[:, None], (vs * M + ws)[:, None]
    return Pairs("v", base, source, base.copy(), (vs * M + wb)[:, None], p.base_pos,
                 p.source_pos)


def test_a_rotated_laf_started_from_an_oaf_is_that_oaf():
    oaf = random_oaf(10, 3, seed=4)
    oaf.fit_standardisation(2 * torch.randn(300, 10) + 1)
    laf = RotatedLinearAlignment(10, 3)
    laf.init_from(oaf)
    g = torch.Generator().manual_seed(0)
    base, source = torch.randn(6, 10, generator=g), torch.randn(6, 10, generator=g)
    with torch.no_grad():
        assert torch.allclose(laf(base, source), oaf(base, source), atol=1e-5)


def test_the_authors_laf_form_moves_no_plane_orthogonally_but_a_rotated_one_does():
    """P = W D_k W^-1 (the authors' W = (M M^T + 0.1 I) diag(s)) is an orthogonal projection
    only for a block-diagonal M M^T; a rotated LAF's R W reaches any plane's."""
    d_k = torch.diag(torch.tensor([1.0] * 2 + [0.0] * 6))
    for seed in range(5):
        torch.manual_seed(seed)
        w = LinearAlignment(8, 2).matrix().detach()
        proj = w @ d_k @ torch.linalg.inv(w)
        assert (proj - proj.T).abs().max() > 1e-2
    oaf = random_oaf(8, 2, seed=0)
    laf = RotatedLinearAlignment(8, 2)
    laf.init_from(oaf)
    w = laf.matrix().detach()
    proj = w @ d_k @ torch.linalg.inv(w)
    assert (proj - proj.T).abs().max() < 1e-5 and (proj @ proj - proj).abs().max() < 1e-5


def test_a_rotated_laf_from_a_random_rotation_moves_the_plane_the_authors_form_lags_on(
        tmp_path):
    """Neither LAF starts from the OAF: the rotated form, from its own random rotation, finds
    the orthogonal plane OAF finds; the authors' form, trained their way (lr 1e-3, constant),
    lags. Each is saved and rebuilt whole: it acts exactly as the trained one."""
    model = PlantedPair().eval()
    data = site_data(model, pair_pairs(512, 0), pair_pairs(256, 1), "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(2,), steps=150, batch_size=64, lr=1e-2, restarts=1, standardize=False,
                    laf_form="rotated", alignments=("oaf", "laf", "laf_sd"))
    kept = {}
    rows, saved = search(model, data, "v", -1, cfg, seed=0, checkpoint=0, kept=kept)
    got = {r["alignment"]: r["iia"] for r in rows if r["split"] == "test"}
    assert got["oaf"] >= 0.95 and got["laf"] >= 0.95, got
    assert got["laf_sd"] < got["laf"] - 0.05, got  # the authors' form lags here
    path = tmp_path / "alignments.safetensors"
    save_file(saved, str(path))
    sub = data.test.take(slice(0, 64))
    for name, cls in (("laf", RotatedLinearAlignment), ("laf_sd", LinearAlignment)):
        inst = load_alignment(path, f"{name}/v/resid[0]@pair/k=2")
        assert type(inst) is cls
        with torch.no_grad():
            rebuilt = forward(model, data, inst, sub, data.src_test[:64])
            trained = forward(model, data, kept[(name, "v", "resid[0]@pair", 2)], sub,
                              data.src_test[:64])
        torch.testing.assert_close(rebuilt, trained)


def test_a_larger_k_starts_at_the_smaller_ks_iia_not_below_it():
    """At k = 4 warm-started from a k = 2 OAF the two added dims are the site's quietest
    directions: before any training the IIA is the k = 2 one. Copying the k = 2 rotation as
    it is would also swap two arbitrary dims, which carry the nuisance the output reads."""
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.loop import Member, train
    from study.analyses.das.search import iia

    model = PlantedPair().eval()
    data = site_data(model, pair_pairs(512, 0), pair_pairs(256, 1), "resid", 0, -1, "cpu")
    small = make_alignment("oaf", D, 2, seed=0)
    train(model, data, [Member(small, seed=0, lr=1e-2)], steps=300, batch_size=64,
          stop_iia=0.995)
    at_2 = iia(model, data, small, "test")
    grown = make_alignment("oaf", D, 4, seed=1)
    grown.extend_from(small, data.fit_acts)
    copied = make_alignment("oaf", D, 4, seed=1)
    copied.load_state_dict(small.state_dict())
    copied.set_interchange_dim(4)
    assert at_2 >= 0.95
    assert iia(model, data, grown, "test") >= at_2 - 0.01
    assert iia(model, data, copied, "test") < at_2 - 0.1
    r2, r4 = small.matrix().detach(), grown.matrix().detach()
    assert torch.allclose(r4[:, :2], r2[:, :2], atol=1e-5)  # the k = 2 subspace, kept
    assert torch.allclose(r4.T @ r4, torch.eye(D), atol=1e-4)


# ----------------------------------------------------------------------------- against pyvene



@pytest.mark.parametrize("name", ["oaf", "laf"])
def test_cached_source_path_equals_pyvenes_source_forward_on_a_transformer(name):
    task, model, _ = _smoke("counting", "rope2")  # explicit, per-example positions
    pairs = task.counterfactuals("up_down:count", 6, split="test", seed=0)
    data = site_data(model, pairs, pairs, "resid", 1, -1, "cpu")
    width = data.src_test.shape[1]
    inst = (OrthogonalAlignment if name == "oaf" else LinearAlignment)(width, 4)
    inst.fit_standardisation(data.fit_acts)
    pt = data.test
    with torch.no_grad():
        ours = forward(model, data, inst, pt, data.src_test)
        iv = module_intervenable(model, "resid", 1, inst)
        theirs = interchange_ids(iv, pt.base_ids, pt.source_ids, base_pos=pt.base_pos.tolist(),
                                 source_pos=pt.source_pos.tolist())
    T = ours.shape[1]
    assert torch.allclose(ours, theirs[:, :T], atol=1e-5)
    plain = model(pt.base_ids[:, :T])
    assert not torch.allclose(ours, plain, atol=1e-3)  # the intervention did something


def test_cached_source_path_equals_pyvenes_source_forward_and_hooks_on_the_recurrent_state():
    task, model, _ = _smoke("counting", "gru")
    pairs = task.counterfactuals("up_down:count", 40, split="test", seed=0)
    data = site_data(model, pairs, pairs, "state", 0, -1, "cpu")
    inst = LinearAlignment(data.src_test.shape[1], 3)
    pt = data.test
    with torch.no_grad():
        ours = forward(model, data, inst, pt, data.src_test)
        step = int(pt.base_pos.mode().values)  # pyvene: one module, so one step per call
        rows = (pt.base_pos == step).nonzero().flatten()
        sub = pt.take(rows)
        iv = module_intervenable(model, "state", step, inst)
        theirs = interchange_ids(iv, sub.base_ids, sub.source_ids, base_pos=sub.base_pos.tolist(),
                                 source_pos=sub.source_pos.tolist())
    T = ours.shape[1]
    assert len(rows) >= 2
    assert torch.allclose(ours[rows], theirs[:, :T], atol=1e-5)
    # every pair at its own step in one forward, against plain hooks (independent of pyvene)
    assert len(pt.base_pos.unique()) >= 3
    with torch.no_grad(), intervene(model, "state", 0, pt.base_pos,
                                    lambda r, v: inst(v, data.src_test[r])):
        hooked = model(pt.base_ids[:, :T])
    torch.testing.assert_close(ours, hooked, atol=1e-6, rtol=1e-6)


def test_the_bases_clean_states_are_read_once_where_nothing_scored_lies_before_the_site():
    """site_data reads each base's clean state at its step once (`with_base_states`); the
    scored logits from them are bit for bit those of the forward that reruns each base's
    steps up to the site. Pairs that score a position before the site, and sites other than
    a recurrent state, get none."""
    task, model, _ = _smoke("counting", "gru")
    pairs = task.counterfactuals("up_down:count", 40, split="test", seed=0)
    data = site_data(model, pairs, pairs, "state", 0, -1, "cpu")
    pt, src = data.test, data.src_test
    assert pt.base_states is not None and pt.base_states.shape == src.shape
    inst = LinearAlignment(src.shape[1], 3)
    iv = site_intervenable(model, "state", 0, inst)
    with torch.no_grad():
        got = scored_iv(iv, pt, src)[0]
        want = scored_iv(iv, replace(pt, base_states=None), src)[0]
    assert torch.equal(got, want)
    early = pt.cf_labels.clone()
    early[0, int(pt.base_pos[0]) - 1] = early[0, -1].clamp_min(0)  # scored before the site
    assert int(pt.base_pos[0]) > 0
    assert with_base_states(model, replace(pt, cf_labels=early, base_states=None),
                            "state").base_states is None
    _, rope, _ = _smoke("counting", "rope2")
    assert site_data(rope, pairs, pairs, "resid", 1, -1, "cpu").test.base_states is None


@pytest.mark.parametrize("batch", [1, 4])
def test_a_state_intervention_at_step_t_leaves_every_earlier_output_unchanged(batch):
    _, model, _ = _smoke("counting", "gru")
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(0, 9, (batch, 12), generator=g)
    inst = random_oaf(model.d_state, 4, seed=0)
    src = torch.randn(batch, model.d_state, generator=g)
    t = 5
    pos = torch.full((batch,), t)
    with torch.no_grad():
        with same_cuts(model, [t]):  # the kernel cut where the intervention cuts it
            plain = model(ids)
        with intervene(model, "state", 0, pos, lambda rows, v: inst(v, src[rows])):
            ours = model(ids)
        iv = module_intervenable(model, "state", t, inst)
        theirs = interchange_ids(iv, ids, ids)  # source state = its own state at t
    assert torch.equal(ours[:, :t], plain[:, :t])
    assert not torch.allclose(ours[:, t], plain[:, t], atol=1e-4)
    assert torch.allclose(theirs, plain, atol=1e-5)  # self-interchange is the identity


# ----------------------------------------------------------------------------- the analysis

def test_das_analysis_writes_its_table_and_alignments(tmp_path):
    task, model, entry = _smoke("counting", "gru")
    cfg = replace(get("analysis", "das").make_config("smoke"),
                  variables=("up_down:count", "up_down:full"), controls=False,
                  alignments=("oaf", "laf", "laf_sd", "random"))
    ctx = AnalysisContext(model, task, cfg, "gru", 7, torch.device("cpu"),
                          tmp_path)
    df = get("analysis", "das").obj(ctx)["das"]
    assert list(df.columns) == ["checkpoint", "variable", "site", "layer", "position",
                                "alignment", "k", "split", "iia", "iia_lo", "iia_hi", "iia_all",
                                "n_pairs", "n_changed", "n_tested", "too_few",
                                "iia_restart_sd", "chance", "confound_input", "confound_answer"]
    for c in ("confound_input", "confound_answer"):  # NaN where a variable tests no pair
        assert df[c].notna().any() and df[c].dropna().between(0, 1).all()
    assert len(df) == 2 * 4 * 2  # variables x alignments x splits (k=2 only)
    assert set(df["alignment"]) == {"oaf", "laf", "laf_sd", "random"}
    assert set(df["site"]) == {"state"} and set(df["position"]) == {-1}
    scored = df[~df["too_few"]]
    assert scored["iia"].between(0, 1).all() and (df["checkpoint"] == 7).all()
    assert df["iia_all"].between(0, 1).all() and (df["n_changed"] <= df["n_pairs"]).all()
    assert (df["n_tested"] <= df["n_changed"]).all()
    # a joint variable (count and phase at once, the authors' `swap_keys: full`) is searched
    # and saved like any other
    inst = load_alignment(tmp_path / "alignments.safetensors", "laf/up_down:full/state@pair/k=2")
    assert isinstance(inst, LinearAlignment) and inst.k == 2
    # analysing another checkpoint keeps this one's alignments beside the new ones
    get("analysis", "das").obj(replace(ctx, checkpoint=9))
    files = sorted(p.name for p in tmp_path.glob("alignments*.safetensors"))
    assert files == ["alignments-7.safetensors", "alignments.safetensors"]
    with safe_open(str(tmp_path / "alignments.safetensors"), framework="pt") as f:
        assert f.metadata()["checkpoint"] == "9"
    _check_pyvene_export(tmp_path, model, df, checkpoint=9)


def _check_pyvene_export(out, model, df, checkpoint):
    """pyvene/index.json lists each scored (trained alignment, variable) once, at its chosen
    k; pyvene's own load rebuilds each with the saved alignment's exact parameters."""
    import json

    from study.analyses.das.export import chosen_k
    from study.models.sites.pyvene_bridge import register

    index = json.loads((out / "pyvene" / "index.json").read_text())
    test = df[(df["split"] == "test") & df["alignment"].isin(["oaf", "laf", "laf_sd"])
              & ~df["too_few"]]
    want = {(a, v) for a, v in zip(test["alignment"], test["variable"])}
    assert {(e["alignment"], e["variable"]) for e in index} == want and want
    train = df[df["split"] == "train"]
    for e in index:  # k chosen on the training split, never on test
        rows = train[(train["alignment"] == e["alignment"])
                     & (train["variable"] == e["variable"])]
        assert e["k"] == chosen_k(dict(zip(rows["k"], rows["iia"])))
        assert e["checkpoint"] == checkpoint
        iv = pv.IntervenableModel.load(str(out / "pyvene" / e["directory"]), register(model))
        loaded = list(iv.interventions.values())
        assert len(loaded) == model.sites.kinds()["state"]  # one per step, equal copies
        saved = load_alignment(out / "alignments.safetensors",
                               f"{e['alignment']}/{e['variable']}/{e['label']}/k={e['k']}")
        for inst in (loaded[0], loaded[-1]):
            assert type(inst) is type(saved) and inst.k == e["k"]
            torch.testing.assert_close(inst.matrix(), saved.matrix(), atol=0, rtol=0)
            torch.testing.assert_close(inst.sigma, saved.sigma, atol=0, rtol=0)


def test_chosen_k_is_the_smallest_within_a_hundredth_of_the_best():
    from study.analyses.das.export import chosen_k

    assert chosen_k({1: 0.5, 2: 0.905, 4: 0.91, 16: 0.90}) == 2
    assert chosen_k({1: 0.5, 2: 0.8, 4: 0.91, 16: 0.90}) == 4
    assert chosen_k({1: float("nan"), 2: 0.3}) == 2
    assert chosen_k({1: float("nan")}) is None


def test_explicit_positions_are_refused_for_pairs_that_carry_their_own():
    task, model, _ = _smoke("counting", "gru")
    pairs = task.counterfactuals("up_down:count", 4, split="test", seed=0)
    with pytest.raises(ValueError, match="aligned pairs only"):
        pair_tensors(pairs, "cpu", position=3)
