"""Role-aligned patching: binding's chain roles sit where the programs put them, a pair patched
at its own role position is scored as a per-row-position patch would score it (and a no-op
patch changes nothing), the `patching_roles` table has its declared shape, the role value is
the position value when every pair has the role at one position, and the report draws it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from study.analyses.common.context import AnalysisContext
from study.analyses.common.interchange import all_right, logit_diff, pair_tensors
from study.analyses.patching.roles import RoleOutcomes, role_rows
from study.analyses.patching.sweep import _patcher, _run_jobs, sweep, tables
from study.core.registry import get
from study.core.tables import PATCHING_ROLES
from study.models.sites.capture import capture
from study.tasks.base import Pairs
from tests.analyses.test_patching import _as_if_answered
from tests.conftest import frozen_smoke_model as _smoke
from tests.models.hook_reference import intervene, replace_fn

CHAIN = ("root", "hop3", "hop2", "hop1", "query_letter", "answer")  # binding, max_depth 4


def _pairs_of(task, programs: list[str]) -> Pairs:
    """Aligned pairs whose bases are `programs` (text), right-padded to one width."""
    rows = [task.encode(list(p)) for p in programs]
    ids = np.full((len(rows), max(map(len, rows))), task.pad_id, np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    aligned = np.full(len(rows), -1, np.int64)
    return Pairs("root_value", ids, ids.copy(), ids * 0 - 1, ids * 0 - 1, aligned, aligned)


def _subset(pairs: Pairs, keep: np.ndarray) -> Pairs:
    return replace(pairs, base_ids=pairs.base_ids[keep], source_ids=pairs.source_ids[keep],
                   base_labels=pairs.base_labels[keep], cf_labels=pairs.cf_labels[keep],
                   base_pos=pairs.base_pos[keep], source_pos=pairs.source_pos[keep],
                   strata={k: v[keep] for k, v in pairs.strata.items()})


# ----------------------------------------------------------------------------- binding's roles

def test_binding_roles_of_hand_written_programs_are_their_chain_positions():
    task, _, _ = _smoke("binding", "gru")
    assert task.config.max_depth == 4
    roles = task.pair_roles(_pairs_of(task, [
        "a=3\nb=a\nc=5\nd=b\nb=7\ne=d\n#e:",  # depth 4; b is reassigned after d copied it
        "a=1\nb=a\na=2\nc=a\n#c:",  # c copies the reassigned a: the chain starts at a=2
        "a=4\nb=2\n#a:",  # depth 1: the query's own line holds the digit, no hop
        "a=1\nb=a\nb=3\n#b:",  # the queried b was reassigned to a digit: depth 1
    ]))
    assert tuple(roles) == CHAIN  # names run to max_depth whatever the programs' depths
    got = {k: v.tolist() for k, v in roles.items()}
    # hops counted from the query: hop1 is the query's own line, as in the hop-role targets
    assert got == {"root": [2, 10, 2, 10], "hop1": [22, 14, -1, -1], "hop2": [14, -1, -1, -1],
                   "hop3": [6, -1, -1, -1], "query_letter": [25, 17, 9, 13],
                   "answer": [26, 18, 10, 14]}
    assert all(v.dtype == np.int64 for v in roles.values())
    # a chain deeper than max_depth (gen_hops) gets its own hop names
    deep = task.pair_roles(_pairs_of(task, ["a=1\nb=a\nc=b\nd=c\ne=d\n#e:", "a=2\n#a:"]))
    assert tuple(deep) == ("root", "hop4", "hop3", "hop2", "hop1", "query_letter", "answer")
    assert deep["hop4"].tolist() == [6, -1] and deep["hop1"].tolist() == [18, -1]
    assert deep["root"].tolist() == [2, 2]


def test_binding_roles_point_at_the_chain_on_generated_pairs():
    task, _, _ = _smoke("binding", "gru")
    pairs = task.counterfactuals("root_value", 50, split="test", seed=0)
    roles = task.pair_roles(pairs)
    depth, rows = pairs.strata["depth"], np.arange(len(pairs))
    # root_value pairs differ exactly at the chain's digit
    diff = np.argmax(pairs.base_ids != pairs.source_ids, 1)
    assert (roles["root"] == diff).all()
    for k in (1, 2, 3):  # hop k exists iff the chain is deeper than k, and copies a letter
        has = roles[f"hop{k}"] >= 0
        assert (has == (depth > k)).all()
        assert (pairs.base_ids[rows[has], roles[f"hop{k}"][has]] <= 26).all()
    last = np.where(depth > 1, roles["hop1"], roles["root"])  # the query's own line
    # ... assigns the queried letter
    assert (pairs.base_ids[rows, last - 2] == pairs.base_ids[rows, roles["query_letter"]]).all()


# ----------------------------------------------------------------------------- the engine

def _role_positions(task, pairs, role):
    pos = task.pair_roles(pairs)[role]
    return pos, np.flatnonzero(pos >= 0)


def test_patching_at_each_pairs_own_role_with_its_own_activation_changes_nothing():
    task, model, _ = _smoke("binding", "gpt12")
    pairs = task.counterfactuals("root_value", 8, split="test", seed=3)
    pt = _as_if_answered(pair_tensors(pairs, "cpu"))
    base = pt.base_ids
    with torch.no_grad(), capture(model, [("resid", 1), ("head", 0)]) as acts:
        plain = model(base)
    ld0, _ = logit_diff(plain, pt.cf_labels, pt.base_labels)
    flip0 = all_right(plain, pt.cf_labels, pt.outputs)
    for role in ("hop1", "root"):
        pos, rows = _role_positions(task, pairs, role)
        assert len(set(pos[rows])) > 1  # the role sits at several positions
        r, p = torch.as_tensor(rows), torch.as_tensor(pos[rows])
        for kind, layer, feats in (("resid", 1, None), ("head", 0, slice(16, 32))):
            iv = _patcher(model, kind, layer, feats, {})  # it takes `feats` of the vectors
            f, ld, _ = _run_jobs(iv, pt, r, p, acts[(kind, layer)][r, p], batch_size=3)
            assert (f == flip0[r].numpy()).all()
            assert ld == pytest.approx(ld0[r].numpy(), abs=1e-5)
    # through the sweep: a source equal to its base scores every role as the unpatched base
    same = replace(pairs, source_ids=pairs.base_ids.copy())
    out = RoleOutcomes(task.pair_roles(same))
    sweep(model, _as_if_answered(pair_tensors(same, "cpu")), [("resid", 0), ("head", 1)], 2,
          batch_size=4, at_roles=out)
    rows = role_rows(out, "root_value", 0, {"depth": same.strata["depth"]})
    floor = {(r["role"], r["stratum"]): r["value_all"] for r in rows if r["site"] == "none"}
    assert {r["site"] for r in rows} == {"none", "resid", "head"}
    for r in rows:
        if r["metric"] == "flip_rate":
            assert r["value_all"] == floor[(r["role"], r["stratum"])], r
        else:
            assert abs(r["value"]) < 1e-6, r


@pytest.mark.parametrize("model_name,site,feats,kind,split,role", [
    ("gpt12", ("resid", 1), None, "root_value", "test", "hop3"),
    ("gpt12", ("head", 0), slice(16, 32), "root_value", "test", "hop3"),
    ("gru", ("state", 0), None, "query", "gen_lines", "query_letter")])
def test_role_values_equal_one_patch_per_pair_at_its_own_position(model_name, site, feats, kind,
                                                                   split, role):
    """A role sits at different positions in different programs (hop3 along the chains, the
    queried letter in programs of different lengths): the role row is a patch of each pair
    that has the role at its own position, scored over those pairs. The transformer runs in
    float64: untrained, it moves the answer's logits by ~1e-6 from a patch mid-chain, which
    float32 would not tell from a patch one token off (the logit differences are float32
    either way, ~1e-7 apart at most when the same patch is computed twice)."""
    task, model, _ = _smoke("binding", model_name)
    model = model.double() if model_name == "gpt12" else model
    pairs = task.counterfactuals(kind, 12, split=split, seed=4)
    pt = pair_tensors(pairs, "cpu")
    tested = pt.changed & (torch.arange(12) % 4 != 0)  # some pairs untested
    pt = replace(pt, base_right=tested, tests=tested)
    out = RoleOutcomes(task.pair_roles(pairs))
    sweep(model, pt, [site], 2, batch_size=5, at_roles=out)
    head = -1 if feats is None else feats.start // 16
    row = {r["metric"]: r for r in role_rows(out, kind, 0)
           if r["role"] == role and r["stratum"] == "all" and r["site"] == site[0]
           and r["head"] == head}
    pos, rows = _role_positions(task, pairs, role)
    assert len(set(pos[rows])) > 1
    r, p = torch.as_tensor(rows), torch.as_tensor(pos[rows])
    sub = pt.take(r)
    with torch.no_grad(), capture(model, [site]) as acts:
        model(sub.source_ids)
    fs = feats if feats is not None else slice(None)
    with torch.no_grad(), intervene(model, *site, p,
                                    replace_fn(acts[site][torch.arange(len(r)), p][:, fs],
                                               feats)):
        logits = model(sub.base_ids)
    with torch.no_grad():
        base_logits = model(sub.base_ids)
    flip = all_right(logits, sub.cf_labels, sub.outputs).numpy()
    ld, ok = logit_diff(logits, sub.cf_labels, sub.base_labels)
    ldb, _ = logit_diff(base_logits, sub.cf_labels, sub.base_labels)
    t = sub.tested.numpy()
    m = (ok & sub.tested).numpy()
    assert row["flip_rate"]["n_pairs"] == len(rows)
    assert row["flip_rate"]["n_tested"] == t.sum() > 0
    assert row["flip_rate"]["value_all"] == pytest.approx(flip.mean())
    assert row["flip_rate"]["value"] == pytest.approx(flip[t].mean())
    effect = float((ld.numpy()[m] - ldb.numpy()[m]).mean())
    assert abs(effect) > 1e-6  # the patch moves the answer, so a wrong position would show
    assert row["logit_diff"]["value"] == pytest.approx(effect, abs=2e-7 if model_name == "gpt12"
                                                       else 1e-5)


def test_role_value_equals_position_value_when_every_pair_has_the_role_at_one_position():
    task, model, _ = _smoke("binding", "gpt12")
    pairs = task.counterfactuals("root_value", 60, split="test", seed=5)
    line = np.bincount(pairs.strata["root_line"]).argmax()
    pairs = _subset(pairs, np.flatnonzero(pairs.strata["root_line"] == line)[:8])
    assert len(pairs) >= 4
    pt = pair_tensors(pairs, "cpu")
    tested = pt.changed & (torch.arange(len(pt)) % 3 != 1)
    pt = replace(pt, base_right=tested, tests=tested)
    out = RoleOutcomes(task.pair_roles(pairs))
    sites = [("resid", 0), ("resid", 2), ("head", 1)]
    acc, ref = sweep(model, pt, sites, 2, batch_size=3, at_roles=out)
    by_pos = {(r["site"], r["layer"], r["head"], r["position"], r["metric"]): r
              for r in tables(acc, ref, "root_value", True, 0)}
    n_lines = task.config.n_lines
    at = {"root": 4 * line + 2, "query_letter": 4 * n_lines + 1, "answer": 4 * n_lines + 2}
    checked = 0
    for r in role_rows(out, "root_value", 0):
        if r["role"] not in at or r["site"] == "none":
            continue
        want = by_pos[(r["site"], r["layer"], r["head"], at[r["role"]], r["metric"])]
        for col in ("value", "value_all", "n_pairs", "n_changed", "n_tested"):
            assert r[col] == pytest.approx(want[col], abs=1e-5, nan_ok=True), (r, col)
        checked += 1
    assert checked == 3 * (2 + 2) * 3  # roles x units (2 resid + 2 heads) x metrics


# ----------------------------------------------------------------------------- the analysis

@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """The patching analysis of a smoke gpt12 on binding, every changed pair tested."""
    import study.analyses.patching.sweep as engine
    task, model, _ = _smoke("binding", "gpt12")
    cfg = replace(get("analysis", "patching").make_config("smoke"), n_pairs=10,
                  kinds=("root_value", "distractor"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "judged", lambda model, pt, batch_size=512: _as_if_answered(pt))
        ctx = AnalysisContext(model, task, cfg, "gpt12", 3, torch.device("cpu"),
                              tmp_path_factory.mktemp("patching"))
        return task, cfg, get("analysis", "patching").obj(ctx)


def test_patching_roles_table_has_one_row_per_site_layer_head_role_kind_stratum_metric(analysed):
    task, cfg, out = analysed
    df = out[PATCHING_ROLES.name]
    assert list(df.columns) == ["checkpoint", "site", "layer", "head", "role", "counterfactual",
                                "stratum", "metric", "value", "value_all", "n_pairs",
                                "n_changed", "n_tested"]
    keys = ["site", "layer", "head", "role", "counterfactual", "stratum", "metric"]
    assert not df.duplicated(keys).any()
    assert list(dict.fromkeys(df["role"])) == list(CHAIN)
    units = {("none", -1, -1), *(("resid", l, -1) for l in range(3)),
             *(("head", l, h) for l in range(2) for h in range(2))}
    flips = df[(df["metric"] == "flip_rate") & (df["stratum"] == "all")]
    assert len(flips) == len(units) * len(CHAIN) * 2  # every unit, role and kind
    assert set(zip(flips["site"], flips["layer"], flips["head"])) == units
    pairs = task.counterfactuals("root_value", cfg.n_pairs, split=cfg.split, seed=cfg.seed)
    depth = pairs.strata["depth"]
    rv = df[(df["counterfactual"] == "root_value") & (df["site"] == "none")]
    n = rv.set_index(["role", "stratum"])["n_pairs"]
    assert n[("root", "all")] == n[("answer", "all")] == cfg.n_pairs
    assert n[("hop2", "all")] == (depth > 2).sum()
    assert len(np.unique(depth)) > 1
    for d in np.unique(depth):  # per depth: only the roles a chain of that depth has
        roles = set(rv.loc[rv["stratum"] == f"depth={d}", "role"])
        assert roles == {"root", *(f"hop{k}" for k in range(1, d)), "query_letter", "answer"}
        assert n[("root", f"depth={d}")] == (depth == d).sum()
    # patching the first stream at the chain's digit hands over the whole input switch
    whole = df[(df["site"] == "resid") & (df["layer"] == 0) & (df["role"] == "root")
               & (df["counterfactual"] == "root_value") & (df["metric"] == "norm_logit_diff")
               & (df["stratum"] == "all")]
    assert whole["value"].item() == pytest.approx(1.0, abs=1e-4)
    # distractor pairs change no answer: no tested pair, flip rate NaN, value_all kept
    dis = df[(df["counterfactual"] == "distractor") & (df["metric"] == "flip_rate")]
    assert dis["value"].isna().all() and (dis["n_tested"] == 0).all()


def test_report_draws_the_role_heatmap_in_chain_order(analysed, tmp_path):
    from study.claims.runs import RunTables
    from study.reports.sections.patching import build

    _, _, out = analysed
    run = RunTables(tmp_path, {"task": "binding", "model": "gpt12"}, {}, "done", None, None,
                    tables=dict(out), label="gpt12 s0")
    figs = {f.key: f for f in build([run])}
    spec = figs["patching-roles-gpt12-s0"].spec()
    rows = [r for data in spec["datasets"].values() for r in data]
    assert list(dict.fromkeys(r["role"] for r in rows)) == list(CHAIN)
    df = out[PATCHING_ROLES.name]
    want = df[(df["metric"] == "flip_rate") & (df["site"] == "resid") & (df["stratum"] == "all")
              & (df["counterfactual"] == "root_value")]
    got = {(r["site_layer"], r["role"]): r["value"] for r in rows
           if r["counterfactual"] == "root_value"}
    assert got == {(f"resid[{l}]", role): v
                   for l, role, v in zip(want["layer"], want["role"], want["value"])}
