"""Probes: a planted linear variable is recovered, its shuffled control is not, and the
analysis runs on tiny real models (a transformer and an RNN) at scale=smoke."""
import numpy as np
import pytest
import torch

from study.analyses.probes import spread
from study.analyses.probes.fit import POOLED, probe_site, shuffled
from study.analyses.common.context import AnalysisContext
from study.core import registry
from study.core.errors import UsageError


def _planted(n=240, pos=4, d=12, n_classes=3, seed=0):
    """acts (n, pos, d) noise, except that position 2 holds the label along 3 directions."""
    rng = np.random.default_rng(seed)
    y = rng.integers(n_classes, size=(n, pos))
    acts = rng.normal(size=(n, pos, d))
    directions = 3.0 * rng.normal(size=(n_classes, d))
    acts[:, 2] += directions[y[:, 2]]
    return acts, y


def test_probe_recovers_planted_variable_and_control_stays_at_chance():
    acts, y = _planted()
    train, test = np.arange(160), np.arange(160, 240)
    rows = probe_site(acts, {"v": y}, train, test, [0, 2], pooled=False,
                      controls={"v": shuffled(y, 1)}, min_train=8, min_test=4,
                      max_pooled=1000, C=1.0, max_iter=200)
    acc = {(p, c, s): a for _, p, c, s, a, _ in rows}
    assert acc[(2, False, "test")] > 0.95  # planted: linearly decodable
    assert acc[(0, False, "test")] < 0.55  # noise position: chance is 1/3
    assert acc[(2, True, "test")] < 0.55  # shuffled labels: chance even where planted


def test_shuffled_keeps_undefined_labels_and_label_counts():
    y = np.array([[0, -1], [1, 2], [1, -1], [2, 2]])
    s = shuffled(y, 0)
    assert (s == -1).tolist() == (y == -1).tolist()
    assert sorted(s[s >= 0].tolist()) == sorted(y[y >= 0].tolist())


def _within_positions(values, seed):
    """The former control: each position's labels permuted among the sequences."""
    out, rng = values.copy(), np.random.default_rng(seed)
    for p in range(values.shape[1]):
        out[:, p] = rng.permutation(values[:, p])
    return out


def test_pooled_control_is_near_chance_where_the_label_follows_the_position():
    # the label is mostly the position's (p mod 3) and the activations say the position:
    # a probe reads it, and so would a control that keeps each position's labels
    rng = np.random.default_rng(0)
    n, pos, d = 300, 6, 16
    y = np.where(rng.random((n, pos)) < 0.85, np.arange(pos) % 3, rng.integers(3, size=(n, pos)))
    acts = rng.normal(size=(n, pos, d)) + 4.0 * rng.normal(size=(pos, d))[None]
    acts += 3.0 * rng.normal(size=(3, d))[y]
    train, test = np.arange(200), np.arange(200, 300)

    def pooled(controls):
        rows = probe_site(acts, {"v": y}, train, test, [], pooled=True, controls={"v": controls},
                          min_train=8, min_test=4, max_pooled=5000, C=1.0, max_iter=300)
        return {c: a for _, p, c, s, a, _ in rows if s == "test" and p == POOLED}

    real_and_control = pooled(shuffled(y, 1))
    assert real_and_control[False] > 0.95  # the representation holds the variable
    assert real_and_control[True] < 0.45  # chance: the label marginal is near uniform (1/3)
    assert pooled(_within_positions(y, 1))[True] > 0.7  # a position baseline, not a control


def test_assign_add_probe_variables_follow_the_causal_model():
    e = registry.get("task", "assign_add")
    task = e.obj(e.make_config("smoke"))
    ex = task.split("test")
    ids = ex.ids[:50].astype(np.int64)
    v = task.probe_variables(ids)
    x, y = task.operands(ids)
    assert (v["x"][:, -1] == x).all() and (v["y"][:, -1] == y).all()
    rows, cols = np.nonzero(v["var_of_num"] >= 0)
    # the labelled token is a number whose predecessor is the variable named by the label
    assert (ids[rows, cols] < task.config.p).all()
    assert (ids[rows, cols - 1] - task.var0 == v["var_of_num"][rows, cols]).all()


def _ctx(task_name, model_name, tmp_path, **overrides):
    te = registry.get("task", task_name)
    task = te.obj(te.make_config("smoke"))
    me = registry.get("model", model_name)
    torch.manual_seed(0)
    model = me.obj(me.make_config("smoke"), len(task.vocab), task.seq_len).eval()
    cfg = registry.get("analysis", "probes").make_config("smoke", overrides)
    return AnalysisContext(model, task, cfg, model_name, 7, torch.device("cpu"),
                           tmp_path, 0)


@pytest.mark.parametrize("task_name,model_name,site,over", [
    ("assign_add", "attn2", "resid", {"positions": (13, 15), "variables": ("x", "var_of_num")}),
    ("counting", "gru", "state", {"positions": (3, 25), "variables": ("up_down:count",)}),
])
def test_probes_run_at_smoke(task_name, model_name, site, over, tmp_path):
    ctx = _ctx(task_name, model_name, tmp_path, **over)
    table = registry.get("analysis", "probes").obj(ctx)["probes"]
    assert list(table.columns) == ["checkpoint", "variable", "site", "layer", "position",
                                   "split", "accuracy", "control", "converged"]
    assert set(table.site) == {site} and (table.checkpoint == 7).all()
    assert set(table.variable) == set(over["variables"])
    assert set(table.position) <= set(over["positions"]) | {POOLED}
    assert POOLED in set(table.position)
    assert set(table.control) == {False, True} and set(table.split) == {"train", "test"}
    assert table.accuracy.between(0, 1).all()
    if model_name == "attn2":
        assert set(table.layer) == {0, 1, 2}  # resid entering each layer and the final stream


def test_a_probe_stopped_at_max_iter_is_flagged_once_per_analysis(tmp_path, capsys):
    # labels independent of the activations and max_iter=1: lbfgs cannot have converged
    rng = np.random.default_rng(0)
    acts, y = rng.normal(size=(60, 2, 8)), rng.integers(3, size=(60, 2))
    rows = probe_site(acts, {"v": y}, np.arange(40), np.arange(40, 60), [0, 1], pooled=False,
                      controls={"v": shuffled(y, 1)}, min_train=8, min_test=4,
                      max_pooled=1000, C=1.0, max_iter=1)
    assert rows and not any(r[-1] for r in rows)
    converged = probe_site(acts[:, :1], {"v": y}, np.arange(40), np.arange(40, 60), [0],
                           pooled=False, controls={"v": shuffled(y, 1)}, min_train=8,
                           min_test=4, max_pooled=1000, C=1.0, max_iter=500)
    assert all(r[-1] for r in converged)

    ctx = _ctx("counting", "gru", tmp_path, positions=(3, 25), variables=("up_down:count",),
               max_iter=1)
    capsys.readouterr()
    table = registry.get("analysis", "probes").obj(ctx)["probes"]
    err = capsys.readouterr().err.splitlines()
    n_fits = int((table.split == "test").sum())
    n_failed = int((~table.converged[table.split == "test"]).sum())
    assert n_failed >= 1
    assert err == [f"warning: {n_failed} of {n_fits} probes did not converge within "
                   f"max_iter=1; raise probes.max_iter"]


def test_max_positions_probes_an_even_spread_that_keeps_both_ends(tmp_path):
    assert spread(list(range(67)), 6) == [0, 13, 26, 40, 53, 66]
    assert spread([4, 9], 6) == [4, 9] and spread(list(range(10)), 0) == list(range(10))
    assert spread(list(range(10)), 1) == [9]
    ctx = _ctx("counting", "gru", tmp_path, variables=("up_down:count",), max_positions=3)
    table = registry.get("analysis", "probes").obj(ctx)["probes"]
    width = ctx.task.seq_len
    probed = set(table.position) - {POOLED}
    assert probed and probed <= {0, round((width - 1) / 2), width - 1}
    assert POOLED in set(table.position)
    with pytest.raises(UsageError, match="probes.max_positions=-1"):
        registry.get("analysis", "probes").make_config("smoke", {"max_positions": "-1"})
