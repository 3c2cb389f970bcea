"""DAS scoring: IIA on tested pairs (an intervention the network ignores scores 0), the
Wilson interval, the too-few flag, the step-0 trained control and the restart search."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from study.analyses.common.context import AnalysisContext
from study.analyses.common.stats import iia_scores, wilson_interval
from study.analyses.das import DasConfig
from study.analyses.das.search import search, site_data
from study.core.registry import get
from study.tasks.base import Pairs
from tests.analyses.test_das import C, M, Planted, planted_pairs
from tests.conftest import frozen_smoke_model as _smoke


class Ignoring(Planted):
    """The planted network, but its output reads the embedding, not the (intervened) site:
    every intervention leaves the output at the base's answer."""

    def forward(self, ids):
        e = self.emb[ids]
        self.sites.resid[0](e)  # the site runs (and is intervened on); its output is unused
        r = e @ self.qv
        return -((r[..., None, :] - self.protos) ** 2).sum(-1)


class Misreading(Ignoring):
    """The ignoring network, but it misreads every base whose nuisance w is 0 as the next
    class, (v + 1) mod C: those bases' outputs are wrong, and where the source's class is
    v + 1 they are already the counterfactual answer."""

    def forward(self, ids):
        logits = super().forward(ids)  # (batch, pos, C)
        return torch.where((ids % M == 0)[..., None], logits.roll(1, -1), logits)


def expected_judgement(pairs):
    """For `Misreading` on planted-style pairs: (base_right, tests, right under a no-op),
    each (n,) bool, from the labels alone."""
    w, vb = pairs.base_ids[:, 0] % M, pairs.base_labels[:, 0]
    out = np.where(w == 0, (vb + 1) % C, vb)  # what the network answers on the base
    base_right = out == vb
    noop_right = out == pairs.cf_labels[:, 0]
    return base_right, base_right & ~noop_right, noop_right


def mixed_pairs(n, seed, unchanged_share):
    """Planted pairs of which a share has source value = base value (unchanged pairs)."""
    p = planted_pairs(n, seed)
    rng = np.random.default_rng(seed + 100)
    same = rng.random(n) < unchanged_share
    vb = p.base_labels[:, 0]
    src = np.where(same, vb * M + rng.integers(M, size=n), p.source_ids[:, 0])[:, None]
    cf = np.where(same, vb, p.cf_labels[:, 0])[:, None]
    return Pairs("v", p.base_ids, src, p.base_labels, cf, p.base_pos, p.source_pos)


def test_an_ignored_intervention_scores_zero_on_changed_pairs_and_the_unchanged_share_on_all():
    model = Ignoring().eval()
    test = mixed_pairs(300, 1, 0.3)
    data = site_data(model, mixed_pairs(200, 0, 0.3), test, "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(2,), steps=20, batch_size=64, lr=1e-2, restarts=2, min_changed=10)
    rows, _ = search(model, data, "v", -1, cfg, seed=0, checkpoint=0)
    unchanged = 1 - test.changed.mean()
    assert 0.2 < unchanged < 0.4
    for r in rows:
        if r["split"] != "test":
            continue
        assert r["iia"] == 0.0 and r["iia_lo"] == 0.0 and 0 < r["iia_hi"] < 0.05, r
        assert r["iia_all"] == pytest.approx(unchanged), r
        assert r["n_pairs"] == 300 and r["n_changed"] == int(test.changed.sum())
        assert r["n_tested"] == r["n_changed"]  # it answers every base: the changed are tested


def test_only_pairs_the_network_answers_and_does_not_already_flip_are_tested():
    """Pairs whose base the network misreads, among them pairs whose base output is already
    the counterfactual label, are not counted: an intervention that does nothing scores 0 on
    the tested pairs, though on the changed pairs it would score above 0. n_tested <= n_changed.
    The step-0 control is judged by the analysed network (`judge`), so both score the same
    pairs."""
    model = Misreading().eval()
    test = mixed_pairs(300, 1, 0.3)
    data = site_data(model, mixed_pairs(200, 0, 0.3), test, "resid", 0, -1, "cpu")
    base_right, tests, noop_right = expected_judgement(test)
    assert (data.test.base_right.numpy() == base_right).all()
    assert (data.test.tested.numpy() == tests).all()
    assert (noop_right & test.changed).any()  # misread bases already give the cf answer
    assert not tests[noop_right].any() and not tests[~base_right].any()
    cfg = DasConfig(k=(2,), steps=20, batch_size=64, lr=1e-2, restarts=2, min_changed=10)
    rows, _ = search(model, data, "v", -1, cfg, seed=0, checkpoint=0)
    for r in rows:
        if r["split"] != "test":
            continue
        assert r["iia"] == 0.0 and r["iia_lo"] == 0.0, r
        assert r["iia_all"] == pytest.approx(noop_right.mean()), r
        assert r["n_tested"] == tests.sum() < r["n_changed"] == test.changed.sum()
    judged_by_other = site_data(Ignoring().eval(), mixed_pairs(200, 0, 0.3), test, "resid", 0,
                                -1, "cpu", judge=model)
    assert (judged_by_other.test.tested.numpy() == tests).all()


def test_the_interval_holds_the_estimate_shrinks_with_more_pairs_and_covers_the_truth():
    rng = np.random.default_rng(0)
    widths = []
    for n in (100, 400, 1600):
        right = rng.random(n) < 0.7
        lo, hi = wilson_interval(right)
        assert lo <= right.mean() <= hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] < 0.05  # ~ 2 * 1.96 * sqrt(0.21 / 1600) = 0.045
    assert all(math.isnan(x) for x in wilson_interval(np.zeros(0, bool)))
    # 95 % coverage: of 400 draws of 50 pairs at p = 0.9, about 380 intervals hold 0.9
    covered = sum(lo <= 0.9 <= hi for lo, hi in
                  (wilson_interval(rng.random(50) < 0.9) for _ in range(400)))
    assert 360 <= covered <= 400


def test_the_interval_keeps_a_width_when_every_pair_or_none_is_right():
    for right, inside in ((np.ones(40, bool), 1.0), (np.zeros(40, bool), 0.0)):
        lo, hi = wilson_interval(right)
        assert lo <= inside <= hi and 0.05 < hi - lo < 0.15  # 40 pairs: about 0.09 wide


def test_a_variable_with_too_few_changed_pairs_is_flagged_not_scored():
    right = np.array([True, False, True, True])
    changed = np.array([True, True, False, False])
    s = iia_scores(right, changed, changed, min_changed=3)
    assert s["too_few"] and math.isnan(s["iia"]) and math.isnan(s["iia_lo"])
    assert s["iia_all"] == 0.75 and s["n_changed"] == 2 and s["n_pairs"] == 4
    s = iia_scores(right, changed, changed, min_changed=2)
    assert not s["too_few"] and s["iia"] == 0.5
    # the minimum applies to the tested pairs, and IIA is over them alone
    tested = np.array([True, False, False, False])
    s = iia_scores(right, changed, tested, min_changed=2)
    assert s["too_few"] and math.isnan(s["iia"]) and s["n_tested"] == 1 and s["n_changed"] == 2
    s = iia_scores(right, changed, tested, min_changed=1)
    assert not s["too_few"] and s["iia"] == 1.0


def test_larger_k_keeps_what_smaller_k_found_and_restarts_report_their_spread():
    """The variable lives in 2 dims; at k = 4 and 8 the extra dims are nuisance the output
    never reads, so IIA must not fall (warm start from the previous k, best of restarts)."""
    model = Planted().eval()
    data = site_data(model, planted_pairs(512, 0), planted_pairs(256, 1), "resid", 0, -1, "cpu")
    cfg = DasConfig(k=(8, 2, 4), steps=300, batch_size=64, lr=1e-2, restarts=2,
                    alignments=("oaf",), min_changed=10, patience=60)
    rows, _ = search(model, data, "v", -1, cfg, seed=0, checkpoint=0)
    test = {r["k"]: r for r in rows if r["split"] == "test"}
    assert list(test) == [2, 4, 8]  # increasing k
    assert all(test[k]["iia"] >= 0.95 for k in (2, 4, 8)), test
    assert all(not math.isnan(test[k]["iia_restart_sd"]) for k in test)


def test_the_analysis_fits_the_trained_control_on_the_step_0_network(tmp_path):
    task, model, entry = _smoke("counting", "gru")
    torch.manual_seed(123)
    _, untrained, _ = _smoke("counting", "gru")
    with torch.no_grad():  # a different (still untrained) network than the analysed one
        for p in untrained.parameters():
            p.add_(0.3 * torch.randn_like(p))
    asked = []

    def model_at(step):
        asked.append(step)
        return untrained

    cfg = replace(get("analysis", "das").make_config("smoke"), variables=("up_down:count",))
    ctx = AnalysisContext(model, task, cfg, "gru", 7, torch.device("cpu"),
                          tmp_path, model_at=model_at)
    out = get("analysis", "das").obj(ctx)
    das, control = out["das"], out["das_control"]
    assert asked == [0]
    assert list(control.columns) == list(das.columns)
    assert (control["checkpoint"] == 0).all() and (das["checkpoint"] == 7).all()
    assert set(control["alignment"]) == {"oaf", "laf"}  # the random rotation stays in das
    key = ["variable", "site", "layer", "position", "k", "split"]
    assert set(map(tuple, control[key].to_numpy())) == set(map(tuple, das[key].to_numpy()))
    assert set(map(tuple, out["das_shuffled"][key].to_numpy())) == set(
        map(tuple, das[key].to_numpy()))  # smoke: one k, the largest
    # without a way to load step 0 the control table is empty, with a warning; the shuffled
    # control, on the analysed network, still runs
    with pytest.warns(UserWarning, match="step-0"):
        out = get("analysis", "das").obj(replace(ctx, model_at=None))
    assert out["das_control"].empty and len(out["das_shuffled"])


def test_the_t_interval_over_runs_is_students_and_needs_two_runs():
    """The interval the seed verdicts and the paired alignment gaps share: mean ± t(0.975,
    n − 1) · sd / √n, with no interval from one run."""
    from scipy.stats import t

    from study.core.intervals import t_interval
    mean, lo, hi = t_interval(np.array([0.2, 0.4, 0.6]))
    half = t.ppf(0.975, 2) * 0.2 / np.sqrt(3)
    assert mean == pytest.approx(0.4) and (lo, hi) == pytest.approx((0.4 - half, 0.4 + half))
    assert t_interval(np.array([0.2, 0.4, 0.6]), sd=0.4)[2] == pytest.approx(0.4 + 2 * half)
    one = t_interval(np.array([0.7]))
    assert one[0] == 0.7 and np.isnan(one[1]) and np.isnan(one[2])
