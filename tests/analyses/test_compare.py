"""Comparisons across runs: basis-free similarity, value geometry and stitching on planted
networks whose variable subspace is known, one a rotated copy of another, one carrying
nothing."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from study.analyses.compare import CompareConfig, Subject, compare
from study.analyses.compare.measures import linear_cka, procrustes_similarity, shuffled_baseline
from study.analyses.compare.projection import Subspace
from study.analyses.compare.values import layout
from study.models.sites.modules import Sites
from study.tasks.base import Examples, Pairs

D, C, M = 12, 4, 6  # site width, values of the variable, nuisance values


def _orthogonal(d, seed):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    return q * torch.sign(torch.diagonal(r))


class Planted(nn.Module):
    """Token (v, w) -> h = [c_v ; n_w] Qᵀ Rotᵀ at site resid[0]; the output reads the variable
    back through Rot Q[:, :2] and names the nearest of the C value prototypes (a ring of radius
    3) or, nearest the origin, "no value" (class C). `rot` rotates the whole site (a copy of the network in other
    coordinates); `carries=False` writes no variable (a network that does not carry it)."""

    def __init__(self, rot=None, carries=True):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        q = _orthogonal(D, 1)
        angle = 2 * math.pi * torch.arange(C) / C
        self.register_buffer("protos", 3 * torch.stack([angle.cos(), angle.sin()], 1))  # (C, 2)
        nuisance = 3 * torch.randn(M, D - 2, generator=g)
        values = self.protos if carries else torch.zeros(C, 2)
        codes = torch.cat([values.repeat_interleave(M, 0), nuisance.repeat(C, 1)], 1)
        rot = torch.eye(D) if rot is None else rot
        self.register_buffer("emb", codes @ q.T @ rot)  # (C*M, D): token id = v*M + w
        self.register_buffer("basis", rot.T @ q)  # (D, D): its first two columns hold v
        self.sites = Sites(resid=1)

    def forward(self, ids):  # ids (batch, pos)
        h = self.sites.resid[0](self.emb[ids])  # (batch, pos, D)
        r = h @ self.basis[:, :2]  # (batch, pos, 2)
        protos = torch.cat([self.protos, torch.zeros(1, 2)])  # (C + 1, 2): class C = none
        return -((r[..., None, :] - protos) ** 2).sum(-1)  # (batch, pos, C + 1)


class PlantedTask:
    """The planted variable `v` as a task: one-token sequences, pairs that swap v."""

    name, splits, pad_id = "planted", ("test",), 0
    config = SimpleNamespace(held_out=(3,))

    def counterfactuals(self, kind, n, split="test", seed=0):
        rng = np.random.default_rng(seed + (split == "train") * 1000)
        vb, vs = rng.integers(C, size=n), rng.integers(C, size=n)
        base = (vb * M + rng.integers(M, size=n))[:, None]
        source = (vs * M + rng.integers(M, size=n))[:, None]
        aligned = np.full(n, -1)
        return Pairs("v", base, source, vb[:, None], vs[:, None], aligned, aligned.copy())

    def split(self, name):
        ids = np.arange(C * M)[:, None]
        return Examples(ids, ids // M)

    def probe_variables(self, ids, labels=None):
        return {"v": np.asarray(ids) // M}


def _subject(tmp_path, name, model, in_plane=None):
    """A subject whose saved OAF alignment's first two columns span its variable plane
    (turned inside the plane by `in_plane`, as a separately trained alignment would be)."""
    R = model.basis.clone()
    if in_plane is not None:
        R[:, :2] = R[:, :2] @ in_plane
    key = "oaf/v/resid[0]@pair/k=2"
    path = tmp_path / f"{name}.safetensors"
    save_file({key: R.contiguous(), key + "/k": torch.tensor(2), key + "/mu": torch.zeros(D),
               key + "/sigma": torch.ones(D)}, str(path))
    return Subject(name, "planted", 0, model.eval(), path)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    angle = torch.tensor(0.7)
    plane = torch.stack([torch.stack([angle.cos(), -angle.sin()]),
                         torch.stack([angle.sin(), angle.cos()])])
    subjects = [_subject(tmp, "a", Planted()),
                _subject(tmp, "a_rotated", Planted(rot=_orthogonal(D, 5)), plane),
                _subject(tmp, "blank", Planted(carries=False))]
    cfg = CompareConfig(n_fit=400, n_test=400, n_geometry=50)
    return compare(subjects, PlantedTask(), cfg, torch.device("cpu"))


def _row(df, run, other, **kw):
    sel = (df["run"] == run) & (df["other_run"] == other)
    for k, v in kw.items():
        sel &= df[k] == v
    assert sel.sum() == 1, (run, other, kw)
    return df[sel].iloc[0]


# ----------------------------------------------------------------------------- measures

def test_cka_and_procrustes_are_one_under_rotation_scaling_and_shift_and_near_zero_shuffled():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 4)) @ np.diag([3.0, 2.0, 1.0, 0.5])
    y = 2.5 * x @ _orthogonal(4, 3).numpy() + 7.0
    assert linear_cka(x, y) == pytest.approx(1.0, abs=1e-9)
    assert procrustes_similarity(x, y) == pytest.approx(1.0, abs=1e-9)
    assert shuffled_baseline(linear_cka, x, y) < 0.02
    assert shuffled_baseline(procrustes_similarity, x, y) < 0.15
    assert math.isnan(linear_cka(x, np.ones((2000, 2))))


def test_subspace_write_of_its_own_read_is_the_identity_and_matches_an_interchange():
    W = _orthogonal(D, 2)
    s = Subspace.from_matrix(W, 3, mu=torch.randn(D), sigma=torch.rand(D) + 0.5)
    x, src = torch.randn(5, D), torch.randn(5, D)
    assert torch.allclose(s.write(x, s.read(x)), x, atol=1e-5)
    y = s.write(x, s.read(src))
    assert torch.allclose(s.read(y), s.read(src), atol=1e-5)  # the k coordinates moved
    rest = lambda v: s._rotated(v)[:, 3:]  # noqa: E731
    assert torch.allclose(rest(y), rest(x), atol=1e-5)  # the others kept


def test_layout_orients_pc1_with_the_value_and_pads_one_dim_subspaces():
    z = np.array([[2.0], [1.0], [0.0], [-1.0]])
    df = layout(z, np.array([0, 1, 2, 3]))
    assert list(df["value"]) == [0, 1, 2, 3]
    assert df["pc1"].is_monotonic_increasing and (df["pc2"] == 0).all()


# ----------------------------------------------------------------------------- tables

def test_cka_of_a_network_with_its_rotated_copy_is_one_and_shuffled_near_zero(tables):
    sim = tables["compare_similarity"]
    for measure in ("cka", "procrustes"):
        r = _row(sim, "a", "a_rotated", measure=measure)
        assert r["value"] == pytest.approx(1.0, abs=1e-5), measure
        assert r["baseline"] < 0.2, r.to_dict()
        assert r["random_subspace"] < r["value"] - 0.3
    assert _row(sim, "a", "blank", measure="cka")["value"] < 0.1  # nothing shared


def test_stitching_into_a_rotated_copy_recovers_its_own_iia_and_controls_do_not(tables):
    st = tables["compare_stitching"]
    r = _row(st, "a", "a_rotated")
    assert r["own_iia"] > 0.95 and r["n_changed"] > 200
    assert r["n_tested"] == r["n_changed"]  # B answers every base: every changed pair tests
    assert r["iia"] == pytest.approx(r["own_iia"], abs=0.02)
    assert r["fit_r2"] > 0.99
    assert r["shuffled_map_iia"] < 0.1 and r["random_subspace_iia"] < r["iia"] - 0.2


def test_stitching_from_a_network_without_the_variable_is_at_the_control(tables):
    r = _row(tables["compare_stitching"], "blank", "a")
    assert r["own_iia"] > 0.95
    assert r["iia"] == pytest.approx(r["shuffled_map_iia"], abs=0.05)
    assert r["iia"] < 0.1


class Misreading(Planted):
    """Planted, but it misreads every input whose nuisance w is 0 as the next value: on those
    bases its output is wrong, or already the counterfactual label (source value v + 1)."""

    def forward(self, ids):
        logits = super().forward(ids)  # (batch, pos, C + 1)
        rolled = torch.cat([logits[..., :C].roll(1, -1), logits[..., C:]], -1)
        return torch.where((ids % M == 0)[..., None], rolled, logits)


def test_stitching_scores_the_pairs_the_receiving_network_tests(tmp_path):
    """Into a network that misreads some bases, a pair counts only where it answers the base
    with the base label and not the counterfactual one; n_tested says how many did. Over the
    changed pairs the write into a misread base would count as a failure (or, where the
    base already gives the counterfactual label, as a success it did not earn)."""
    subjects = [_subject(tmp_path, "a", Planted()), _subject(tmp_path, "misread", Misreading())]
    cfg = CompareConfig(n_fit=200, n_test=300, n_geometry=20)
    st = compare(subjects, PlantedTask(), cfg, torch.device("cpu"))["compare_stitching"]
    pairs = PlantedTask().counterfactuals("v", 300, split="test", seed=cfg.seed)
    vb, vs = pairs.base_labels[:, 0], pairs.cf_labels[:, 0]
    read_ok = pairs.base_ids[:, 0] % M != 0  # the bases Misreading answers right
    assert ((vs == (vb + 1) % C) & ~read_ok).any()  # some already give the cf answer
    r = _row(st, "a", "misread")
    assert r["n_changed"] == (vs != vb).sum()
    assert r["n_tested"] == ((vs != vb) & read_ok).sum() < r["n_changed"]
    assert r["own_iia"] > 0.95 and r["iia"] > 0.95  # on the tested pairs the write works
    assert _row(st, "misread", "a")["n_tested"] == r["n_changed"]  # `a` tests every one


def test_runs_read_at_the_pairs_own_positions_name_no_role(tables):
    for name in ("compare_similarity", "compare_stitching"):
        assert (tables[name]["role"] == "").all() and (tables[name]["other_role"] == "").all()
    assert (tables["compare_geometry"]["role"] == "").all()


def test_geometry_places_each_value_once_per_run_and_flags_held_out_values(tables):
    geo = tables["compare_geometry"]
    a = geo[geo["run"] == "a"]
    assert sorted(a["value"]) == list(range(C))
    assert a.loc[a["value"] == 3, "held_out"].all() and not a.loc[a["value"] != 3, "held_out"].any()
    ring = a[["pc1", "pc2"]].to_numpy()
    radii = np.linalg.norm(ring, axis=1)  # the planted values sit on a circle of radius 3
    assert radii == pytest.approx(np.full(C, 3.0), rel=0.05)


@pytest.mark.parametrize("name", ["oaf", "laf", "laf_sd", "random"])
def test_subspace_from_a_saved_alignment_interchanges_exactly_as_das_does(tmp_path, name):
    from study.analyses.das.alignment import make_alignment
    inst = make_alignment(name, D, 3, seed=4)
    inst.fit_standardisation(torch.randn(64, D) * 3 + 1)
    if name in ("laf", "laf_sd"):
        with torch.no_grad():
            inst.bias.copy_(torch.randn(D))
    key = f"{name}/v/state@pair/k=3"
    save_file({key + s: t for s, t in inst.saved_tensors().items()}, str(tmp_path / "a.st"))
    space = Subspace.from_file(tmp_path / "a.st", key)
    base, src = torch.randn(8, D), torch.randn(8, D)
    with torch.no_grad():
        expected = inst(base, src)
    assert torch.allclose(space.write(base, space.read(src)), expected, atol=1e-4)


def test_site_labels_parse_as_das_writes_them():
    from study.analyses.compare.paired import SiteRef
    assert SiteRef.parse("state@pair") == SiteRef("state", 0, -1)
    assert SiteRef.parse("resid[1]@pair") == SiteRef("resid", 1, -1)
    assert SiteRef.parse("resid[3]@17") == SiteRef("resid", 3, 17)


# ----------------------------------------------------------------------------- a real GRU

class RotatedState(nn.Module):
    """A copy of a recurrent network whose state is seen, and replaced, in coordinates
    rotated by an orthogonal Q: its `sites.state[t]` carries h Q, the cell goes on with
    (what leaves the site) Qᵀ. Same function, unrelated basis."""

    def __init__(self, inner, Q):
        super().__init__()
        self.inner, self.capabilities = inner, inner.capabilities
        self.n_layers, self.n_heads = inner.n_layers, inner.n_heads
        self.register_buffer("Q", Q)
        self.sites = Sites(state=len(inner.sites.state))
        for t, site in enumerate(inner.sites.state):
            site.register_forward_hook(
                lambda _m, _a, h, t=t: self.sites.state[t](h @ self.Q) @ self.Q.T)

    def site_kinds(self):
        return self.inner.site_kinds()

    def forward(self, ids, readout=None):
        return self.inner(ids, readout=readout)


def test_a_gru_and_its_rotated_state_copy_agree_and_stitching_reproduces_its_interchange():
    import copy

    from study.analyses.compare.paired import SiteRef, paired_vectors
    from study.analyses.compare.stitch import apply_map, fit_map, interchange_right
    from tests.models.hook_reference import intervene
    from tests.conftest import frozen_smoke_model

    task, gru, _ = frozen_smoke_model("counting", "gru")
    d = gru.site_kinds()[0].width
    Q = _orthogonal(d, 11)
    twin = RotatedState(copy.deepcopy(gru), Q).eval()
    site = SiteRef("state", 0)
    pairs = task.counterfactuals("up_down:count", 64, split="test", seed=0)
    va, vb = paired_vectors(gru, pairs, site, "cpu"), paired_vectors(twin, pairs, site, "cpu")
    assert torch.allclose(vb.both, va.both @ Q, atol=1e-5)  # the twin's state is rotated
    R = _orthogonal(d, 12)
    Rb = Q.T @ R
    Rb[:, :2] = Rb[:, :2] @ _orthogonal(2, 13)  # another basis of the same plane
    # standardisation: the mean rotates with the state; a per-dimension scale would not, so
    # both use one isotropic scale
    mu, scale = va.both.mean(0), va.both.std(0).mean().expand(d)
    sa = Subspace.from_matrix(R, 2, mu, scale)
    sb = Subspace.from_matrix(Rb, 2, mu @ Q, scale)
    za, zb = sa.read(va.both), sb.read(vb.both)
    assert linear_cka(za.numpy(), zb.numpy()) == pytest.approx(1.0, abs=1e-5)
    M = fit_map(za, zb)
    written = apply_map(M, sa.read(va.source))
    pt = va.pairs
    own = lambda rows, vecs: sa.write(vecs, sa.read(va.source)[rows])  # noqa: E731
    stitched = lambda rows, vecs: sb.write(vecs, written[rows])  # noqa: E731
    with torch.no_grad(), intervene(gru, "state", 0, pt.base_pos, own):
        logits_a = gru(pt.base_ids)
    with torch.no_grad(), intervene(twin, "state", 0, pt.base_pos, stitched):
        logits_b = twin(pt.base_ids)
    assert torch.allclose(logits_a, logits_b, atol=1e-3)
    assert (interchange_right(twin, site, sb, pt, written)
            == interchange_right(gru, site, sa, pt, sa.read(va.source))).all()


# ----------------------------------------------------------------------------- compare.site

class DeepVariable(Planted):
    """Planted, with two sites: `resid[0]` holds only the nuisance, `resid[1]` adds the
    variable from the input; the output reads resid[1]. Interchanging at resid[0] changes
    nothing, at resid[1] it moves the value."""

    def __init__(self):
        super().__init__()
        self.sites = Sites(resid=2)
        plane = self.basis[:, :2] @ self.basis[:, :2].T  # (D, D): onto the variable plane
        self.register_buffer("nuisance_only", self.emb - self.emb @ plane)

    def forward(self, ids):  # ids (batch, pos)
        h0 = self.sites.resid[0](self.nuisance_only[ids])  # (batch, pos, D)
        h1 = self.sites.resid[1](h0 + (self.emb[ids] - self.nuisance_only[ids]))
        r = h1 @ self.basis[:, :2]
        protos = torch.cat([self.protos, torch.zeros(1, 2)])
        return -((r[..., None, :] - protos) ** 2).sum(-1)


def _two_site_subject(tmp_path, name):
    """A run directory's das files: the OAF saved at resid[0] and resid[1], the das table
    giving resid[1] the better training IIA."""
    import pandas as pd
    from study.core.tables import DAS
    model = DeepVariable()
    folder = tmp_path / name / "analyses" / "das"
    folder.mkdir(parents=True)
    tensors, rows = {}, []
    for layer, iia in ((0, 0.02), (1, 0.99)):
        key = f"oaf/v/resid[{layer}]@pair/k=2"
        tensors.update({key: model.basis.clone().contiguous(), key + "/k": torch.tensor(2),
                        key + "/mu": torch.zeros(D), key + "/sigma": torch.ones(D)})
        rows.append(dict(checkpoint=0, variable="v", site="resid", layer=layer, position=-1,
                         alignment="oaf", k=2, split="train", iia=iia))
    save_file(tensors, str(folder / "alignments.safetensors"))
    DAS.frame(rows).to_parquet(folder / "das.parquet")
    assert isinstance(pd.read_parquet(folder / "das.parquet"), pd.DataFrame)
    return Subject(name, "planted", 0, model.eval(), folder / "alignments.safetensors")


@pytest.mark.parametrize("site, read, works", [
    (("best",), "resid[1]@pair", True),  # the das table's best training IIA
    (("first",), "resid[0]@pair", False),
    (("last",), "resid[1]@pair", True),
    (("resid[2]@pair", "resid[0]@pair"), "resid[0]@pair", False),  # the first one saved
])
def test_compare_site_chooses_which_saved_site_each_run_is_read_at(tmp_path, site, read, works):
    subjects = [_two_site_subject(tmp_path, "a"), _two_site_subject(tmp_path, "b")]
    cfg = CompareConfig(n_fit=200, n_test=200, n_geometry=20, site=site)
    st = compare(subjects, PlantedTask(), cfg, torch.device("cpu"))["compare_stitching"]
    r = _row(st, "a", "b")
    assert (r["site"], r["other_site"]) == (read, read)
    assert (r["own_iia"] > 0.95) == works and (r["iia"] > 0.95) == works  # resid[0] holds no v


def test_compare_site_refuses_what_it_cannot_read(tmp_path):
    from study.core.errors import UsageError
    subjects = [_two_site_subject(tmp_path, "a"), _two_site_subject(tmp_path, "b")]
    cfg = CompareConfig(n_fit=50, n_test=50, n_geometry=10, site=("state@21",))
    with pytest.raises(UsageError, match=r"a saved none of these; it saved resid\[0\]@pair, "
                                         r"resid\[1\]@pair"):
        compare(subjects, PlantedTask(), cfg, torch.device("cpu"))
    for bad, match in ((("best", "first"), "best stands alone"), (("resid1",), "site key"),
                       ((), "compare.site is empty")):
        with pytest.raises(UsageError, match=match):
            CompareConfig(site=bad)


def test_deeper_layers_sort_by_number_not_by_text():
    from study.analyses.compare.sites import choose_site
    saved = ["resid[10]@pair", "resid[2]@pair", "resid[9]@pair"]
    assert choose_site(saved, ("first",), "r") == "resid[2]@pair"
    assert choose_site(saved, ("last",), "r") == "resid[10]@pair"
