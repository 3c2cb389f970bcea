"""DAS controls and arms: the shuffled-variable control (a perfect alignment of the true
variable scores 0 on it, the search scores at chance), where the controls run (the search's
k ladder, with its warm starts, restarts and seeds), and arms that never start from another
arm's fit."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import study.analyses.das.search as search_mod
from study.analyses.common.context import AnalysisContext
from study.analyses.das import DasConfig
from study.analyses.das.alignment import (LinearAlignment, OrthogonalAlignment,
                                          RotatedLinearAlignment)
from study.analyses.das.controls import (control_ks, shuffle_by_value, shuffled_sources,
                                         value_keys)
from study.analyses.das.search import pair_right, search, site_data
from study.core.errors import UsageError
from study.core.registry import get
from tests.analyses.test_das import C, D, Planted, planted_pairs
from tests.conftest import frozen_smoke_model as _smoke


def test_the_shuffled_variable_control_scores_near_zero_where_the_true_variable_scores_one():
    model = Planted().eval()
    train, test = planted_pairs(384, 0), planted_pairs(256, 1)
    data = site_data(model, train, test, "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(2,), steps=200, batch_size=64, lr=1e-2, restarts=1, min_changed=10,
                    alignments=("oaf",))
    kept = {}
    rows, _ = search(model, data, "v", -1, cfg, seed=0, checkpoint=0, kept=kept)
    assert {r["split"]: r["iia"] for r in rows}["test"] >= 0.95
    shuffled = shuffled_sources(data, value_keys(train), value_keys(test), seed=0)
    # bases, labels and tested pairs kept; every source now carries another value
    assert torch.equal(shuffled.test.cf_labels, data.test.cf_labels)
    assert torch.equal(shuffled.test.tested, data.test.tested)
    assert not torch.equal(shuffled.src_test, data.src_test)
    # the alignment that carries the variable perfectly writes the other pair's value: 0
    perfect = kept[("oaf", "v", "resid[0]@pair", 2)]
    right = pair_right(model, shuffled, perfect, "test").numpy()
    assert right[shuffled.test.tested.numpy()].mean() <= 0.02
    # the search on the shuffled pairs finds nothing better than a guess among the values
    rows, _ = search(model, shuffled, "v", -1, cfg, seed=0, checkpoint=0)
    assert {r["split"]: r["iia"] for r in rows}["test"] <= 1 / (C - 1)


def test_shuffling_gives_each_pair_another_value_as_a_permutation_where_counts_allow():
    keys = np.repeat([0, 1, 1, 2, 2, 2], 50)  # one value is half the pairs: still feasible
    perm = shuffle_by_value(keys, seed=3)
    assert sorted(perm) == list(range(len(keys)))  # every source used once
    assert (keys[perm] != keys).all()
    keys = np.repeat([0, 0, 0, 1], 40)  # no permutation can move every 0 to a 1
    perm = shuffle_by_value(keys, seed=3)
    assert (keys[perm] != keys).all()  # sources of the 1s serve several pairs
    assert sorted(shuffle_by_value(np.zeros(10, int), 0)) == list(range(10))  # one value


def test_controls_climb_the_searchs_ladder_up_to_control_k():
    cfg = DasConfig(k=(4, 1, 16, 2))
    assert control_ks(cfg) == (1, 2, 4, 16)  # all, by default
    assert control_ks(cfg, width=8) == (1, 2, 4)  # the ks the site holds
    assert control_ks(DasConfig(k=(1, 2, 4), control_k="2")) == (1, 2)  # the chain up to 2
    with pytest.raises(UsageError, match="das.control_k=3: all, or one k of das.k"):
        DasConfig(k=(1, 2), control_k="3")
    with pytest.raises(UsageError, match="das.control_k=max"):
        DasConfig(k=(1, 2), control_k="max")


@pytest.mark.parametrize("control_k,want", [("1", {1}), ("all", {1, 2})])
def test_the_analysis_writes_both_controls_at_the_control_ks(tmp_path, control_k, want):
    task, model, _ = _smoke("counting", "gru")
    torch.manual_seed(123)
    _, untrained, _ = _smoke("counting", "gru")
    with torch.no_grad():
        for p in untrained.parameters():
            p.add_(0.3 * torch.randn_like(p))
    cfg = replace(get("analysis", "das").make_config("smoke"), variables=("up_down:count",),
                  k=(1, 2), control_k=control_k, alignments=("oaf", "laf_sd", "random"),
                  restarts=1, steps=2, save_pyvene=False)
    ctx = AnalysisContext(model, task, cfg, "gru", 7, torch.device("cpu"), tmp_path,
                          model_at=lambda step: untrained)
    out = get("analysis", "das").obj(ctx)
    assert set(out["das"]["k"]) == {1, 2}
    das = out["das"]  # every row prints its chance level, NaN where no pair is tested
    assert (das["chance"].isna() == (das["n_tested"] == 0)).all()
    assert das["chance"].dropna().between(0, 1).all()
    for table, checkpoint in (("das_shuffled", 7), ("das_control", 0)):
        df = out[table]
        assert set(df["k"]) == want, table
        assert set(df["alignment"]) == {"oaf", "laf_sd"}  # the trained arms, no random
        assert (df["checkpoint"] == checkpoint).all()
        assert list(df.columns) == list(out["das"].columns)
    # the controls score the analysed network's tested pairs
    n = {(r.k, r.split): r.n_tested for r in out["das"].itertuples()}
    assert all(r.n_tested == n[(r.k, r.split)] for r in out["das_shuffled"].itertuples())


def test_no_laf_arm_starts_from_the_oafs_fit(monkeypatch):
    """Every restart's state when training begins, for OAF, the rotated LAF and the authors'
    LAF at k = 2 and 4: no LAF starts where an OAF ended (its interchange is not the OAF's),
    the rotated LAF starts at a random rotation with W = I, and the authors' LAF at k = 4
    does not start from its own k = 2 fit (no warm start)."""
    model = Planted().eval()
    data = site_data(model, planted_pairs(256, 0), planted_pairs(128, 1), "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(2, 4), steps=40, batch_size=64, lr=1e-2, restarts=2, min_changed=10,
                    alignments=("oaf", "laf", "laf_sd"), laf_form="rotated")
    starts = []
    real = search_mod.train

    def record(model_, data_, members, **kw):
        starts.extend((type(m.inst), m.inst.k, proj(m.inst)) for m in members)
        return real(model_, data_, members, **kw)

    monkeypatch.setattr(search_mod, "train", record)
    kept = {}
    search(model, data, "v", -1, cfg, seed=0, checkpoint=0, kept=kept)
    fits = {(name, k): proj(inst) for (name, _, _, k), inst in kept.items()}
    lafs = [(t, k, p) for t, k, p in starts if t is not OrthogonalAlignment]
    assert {(t, k) for t, k, _ in lafs} == {(t, k) for t in (RotatedLinearAlignment,
                                                            LinearAlignment) for k in (2, 4)}
    for t, k, p in lafs:
        assert not torch.allclose(p, fits[("oaf", k)], atol=1e-3), (t, k)
        if t is LinearAlignment and k == 4:
            assert not torch.allclose(p, fits[("laf_sd", 2)], atol=1e-3)
    rotated = [i for i in kept.values() if isinstance(i, RotatedLinearAlignment)]
    fresh = RotatedLinearAlignment(D, 2)  # a fresh one: W = I, so A is its rotation
    assert torch.allclose(fresh.matrix(), fresh.rotate_layer.weight, atol=1e-6) and rotated


def proj(inst) -> torch.Tensor:
    """The interchange's projection P = A D_k A^-1 in standardised space (d, d)."""
    with torch.no_grad():
        a = inst.matrix().double()
        keep = (torch.arange(a.shape[0]) < inst.k).to(a.dtype)
        return (a * keep) @ torch.linalg.inv(a)


def test_variable_groups_expand_to_the_tasks_variables_in_order_without_repeats():
    from study.analyses.das import asked_variables
    counting, binding = get("task", "counting").obj, get("task", "binding").obj
    assert asked_variables(("all",), counting) == counting.causal_variables
    assert asked_variables((), counting) == counting.causal_variables  # empty means all
    assert asked_variables(("main",), counting) == ("up_down:count",)
    assert asked_variables(("main", "up_down:full", "all"), counting) == (
        "up_down:count", "up_down:full", *counting.causal_variables[1:])
    assert asked_variables(("main",), binding) == ("root_value",)
    assert asked_variables(("all",), binding) == ("root_value", "query", "referent", "resolved")
    # a task without headline variables: main is every causal variable
    assert asked_variables(("main",), get("task", "assign_add").obj) == ("x", "y")
    with pytest.raises(UsageError, match="'bogus' is not a causal variable of counting; "
                       "choose from .*, all, main"):
        asked_variables(("main", "bogus"), counting)
    # the small preset searches the headline variables, the paper preset every variable
    presets = get("analysis", "das").presets
    assert presets["small"]["variables"] == ("main",) and "variables" not in presets["paper"]


def test_the_controls_share_the_searchs_warm_start_chain_restarts_and_seeds(tmp_path,
                                                                            monkeypatch):
    """Every fit of the search and of each control, in order: the same (alignment, k, seed,
    restarts) sequence, and at each k after the first each starts from its own chain's fit
    of the k before, never from fresh draws or another chain's fit."""
    task, model, _ = _smoke("counting", "gru")
    torch.manual_seed(5)
    _, untrained, _ = _smoke("counting", "gru")
    calls, real, alive = [], search_mod.fit, []

    def record(model_, data, names, k, cfg, seed, warm=None, *a, **kw):
        given = {name: (warm or {}).get(name) for name in names}  # the search's, at this call
        got = real(model_, data, names, k, cfg, seed, warm, *a, **kw)
        alive.append((data, got))  # the ids below name these objects only while they live
        for name in names:
            calls.append(dict(data=id(data), name=name, k=k, seed=seed, restarts=cfg.restarts,
                              warm=None if given[name] is None else id(given[name]),
                              inst=id(got[name].inst)))
        return got

    monkeypatch.setattr(search_mod, "fit", record)
    cfg = replace(get("analysis", "das").make_config("smoke"), variables=("up_down:count",),
                  k=(1, 2, 3), alignments=("oaf", "laf", "random"), restarts=2, steps=2,
                  save_pyvene=False)
    ctx = AnalysisContext(model, task, cfg, "gru", 7, torch.device("cpu"), tmp_path,
                          model_at=lambda step: untrained)
    get("analysis", "das").obj(ctx)
    runs: dict = {}
    for c in calls:  # one chain per (site data, alignment): the search, shuffled, step 0
        runs.setdefault((c["data"], c["name"]), []).append(c)
    chains = {}
    for (data, name), cs in runs.items():
        if name == "random":
            continue
        chains.setdefault(data, {})[name] = cs
    assert len(chains) == 3  # the search and its two controls
    shapes = [{name: [(c["k"], c["seed"], c["restarts"]) for c in cs]
               for name, cs in chain.items()} for chain in chains.values()]
    assert shapes[0] == shapes[1] == shapes[2]
    assert [k for k, _, _ in shapes[0]["oaf"]] == [1, 2, 3]
    for chain in chains.values():
        for cs in chain.values():
            assert cs[0]["warm"] is None
            for before, now in zip(cs, cs[1:]):
                assert now["warm"] == before["inst"]  # its own chain's fit of the k before


def test_the_paper_preset_runs_grant_et_als_regime_at_smoke_scale(tmp_path, monkeypatch):
    """The `paper` preset, with its budget cut to smoke size: the authors' LAF and OAF side by
    side on the unstandardised site, each k from a fresh draw, at a constant lr, with three
    restarts (a spread over restarts is reported)."""
    task, model, _ = _smoke("counting", "gru")
    paper = get("analysis", "das").make_config("paper")
    cfg = replace(paper, variables=("up_down:count",), k=(1, 2), steps=3, n_train=64,
                  n_test=32, batch_size=32, min_changed=2, controls=False, save_pyvene=False)
    seen = []
    real = search_mod.fit

    def record(model_, data, names, k, cfg_, seed, warm=None, *a, **kw):
        seen.append((names, k, warm is None, cfg_.restarts))
        got = real(model_, data, names, k, cfg_, seed, warm, *a, **kw)
        for fitted in got.values():  # unstandardised: the identity standardisation
            if fitted.inst is not None:
                assert torch.all(fitted.inst.mu == 0) and torch.all(fitted.inst.sigma == 1)
        return got

    trainings, real_train = [], search_mod.train

    def count(model_, data, members, **kw):  # the trainings of one batch
        trainings.append([(type(m.inst).__name__, m.lr, m.lr_floor) for m in members])
        return real_train(model_, data, members, **kw)

    monkeypatch.setattr(search_mod, "fit", record)
    monkeypatch.setattr(search_mod, "train", count)
    ctx = AnalysisContext(model, task, cfg, "gru", 7, torch.device("cpu"), tmp_path)
    out = get("analysis", "das").obj(ctx)["das"]
    assert set(out["alignment"]) == {"oaf", "laf_sd", "random"}
    assert [(k, fresh, restarts) for _, k, fresh, restarts in seen] == [(1, True, 3),
                                                                       (2, True, 3)]
    # per k on the CPU, one batch of OAF's three restarts, one of the authors' LAF's, each
    # at a constant lr 1e-3 (on a GPU the two batches are one, `batch_kinds`)
    oaf, laf_sd = [("OrthogonalAlignment", 1e-3, 1.0)] * 3, [("LinearAlignment", 1e-3, 1.0)] * 3
    assert trainings == [oaf, laf_sd] * 2


def test_the_authors_laf_gets_both_controls_at_every_k_with_the_oaf_searchs_budget(
        tmp_path, monkeypatch):
    """In Grant et al.'s regime (the `paper` preset, cut to smoke size, as `study=counting-grant`
    runs it), the shuffled and step-0 searches of the authors' LAF train at every k of the
    ladder with the budget OAF's own search trains with: the same updates, batch, stopping
    rule, restarts and (constant) learning rate, so that LAF's extra freedom is judged by what
    the same search finds where there is nothing to find."""
    task, model, _ = _smoke("counting", "gru")
    torch.manual_seed(11)
    _, untrained, _ = _smoke("counting", "gru")
    cfg = replace(get("analysis", "das").make_config("paper"), variables=("up_down:count",),
                  k=(1, 2), steps=4, n_train=64, n_test=32, batch_size=32, min_changed=2,
                  restarts=1, controls=True, control_k="all", save_pyvene=False)
    trainings, real = [], search_mod.train

    def record(model_, data, members, snapshot=None, **budget):
        which = dict(snapshot.key)["search"]  # the search or one of its controls
        for m in members:
            trainings.append((which, type(m.inst).__name__, m.inst.k, m.lr, m.lr_floor,
                              tuple(sorted(budget.items()))))
        return real(model_, data, members, snapshot=snapshot, **budget)

    monkeypatch.setattr(search_mod, "train", record)
    ctx = AnalysisContext(model, task, cfg, "gru", 7, torch.device("cpu"), tmp_path,
                          model_at=lambda step: untrained)
    out = get("analysis", "das").obj(ctx)
    for table in ("das_shuffled", "das_control"):
        assert {(a, k) for a, k in zip(out[table]["alignment"], out[table]["k"])} == {
            (a, k) for a in ("oaf", "laf_sd") for k in (1, 2)}, table
    searches = list(dict.fromkeys(d for d, *_ in trainings))
    assert searches == ["trained", "shuffled control", "step-0 control"]
    oaf_budget = {(k, lr, floor, b) for d, name, k, lr, floor, b in trainings
                  if d == "trained" and name == "OrthogonalAlignment"}
    assert {k for k, *_ in oaf_budget} == {1, 2} and len(oaf_budget) == 2
    for d in searches[1:]:
        laf = {(k, lr, floor, b) for dd, name, k, lr, floor, b in trainings
               if dd == d and name == "LinearAlignment"}
        assert laf == oaf_budget, d
