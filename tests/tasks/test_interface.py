"""What analyses read of a task: the Task defaults, `Pairs.changed` on hand-worked and
generated pairs of every task, and each task's probe variables and attention targets on
hand-written sequences."""
from __future__ import annotations

import numpy as np
import pytest

from study.core import registry
from study.tasks.base import IGNORE, Pairs, ProgressMeasures, Task
from study.tasks.binding.causal import interpret
from study.tasks.binding.generate import labels as binding_labels
from study.tasks.counting.causal import MODELS


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path / "cache"))


def make(name: str, scale: str = "smoke"):
    e = registry.get("task", name)
    return e.obj(e.make_config(scale))


def pairs(base_ids, source_ids, base_labels, cf_labels) -> Pairs:
    n = len(base_ids)
    aligned = np.full(n, -1, np.int64)
    return Pairs("k", np.asarray(base_ids), np.asarray(source_ids), np.asarray(base_labels),
                 np.asarray(cf_labels), aligned, aligned.copy())


# --- defaults --------------------------------------------------------------------------------
class _Bare(Task):
    name = "bare"
    vocab = ("PAD", "a")
    seq_len = 2
    splits = ("train",)

    def render(self, ids):
        return ""

    def label_of(self, labels):
        return 0

    def generate(self, split):
        raise NotImplementedError

    def counterfactuals(self, kind, n, split="test", seed=0):
        raise NotImplementedError


def test_defaults_mean_none_or_not_applicable():
    t = _Bare(None)
    ids = np.array([[1, 1], [1, 0]])
    labels = np.array([[IGNORE, 1], [IGNORE, IGNORE]])
    assert t.probe_variables(ids) == {}
    out = t.probe_variables(ids, labels)["output"]
    assert out.dtype == np.int64 and out.tolist() == [[-1, 1], [-1, -1]]
    assert t.attention_targets(ids) == {} and t.operands(ids) is None
    assert t.progress_measures() == ProgressMeasures()
    assert t.stratum_label("depth", np.int64(3)) == "depth=3"


# --- Pairs.changed: hand-worked pairs ---------------------------------------------------------
def test_binding_hand_worked_pairs():
    task = make("binding")
    prog = ["a=3\nb=a\nc=5\n#b:", "a=4\nb=a\nc=5\n#b:", "a=3\nb=a\nc=6\n#b:",
            "a=3\nb=a\nc=5\n#c:"]
    ids = np.array([task.encode(list(p)) for p in prog])
    labels = binding_labels(ids, interpret(ids))  # the answer digit at `:`
    # root_value (3 -> 4: the answer follows), distractor (c: the answer stays), query (b -> c)
    got = pairs(ids[[0, 0, 0]], ids[[1, 2, 3]], labels[[0, 0, 0]],
                labels[[1, 0, 3]]).changed
    assert got.tolist() == [True, False, True]


def test_assign_add_hand_worked_pairs():
    task = make("assign_add")
    text = ["PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + a 27 =",  # 40 + 27 = 67 = 8 mod 59
            "PAD PAD a 41 PAD j 18 PAD PAD PAD k 9 + a 28 =",  # lhs_value source: x 41, y 28
            "PAD PAD a 18 PAD j 40 PAD PAD PAD k 9 + a 28 ="]  # binding source: a, j swapped
    ids = np.array([task.encode(t.split()) for t in text])
    x, y = task.operands(ids)
    assert (x.tolist(), y.tolist()) == ([40, 41, 18], [27, 28, 28])
    labels = np.full(ids.shape, IGNORE)
    labels[:, -1] = (x + y) % 59
    cf = labels[[0, 0]].copy()
    cf[:, -1] = [(41 + 27) % 59, (18 + 27) % 59]  # the base with the source's left value
    assert pairs(ids[[0, 0]], ids[[1, 2]], labels[[0, 0]], cf).changed.tolist() == [True, True]
    # a source whose left value equals the base's changes nothing
    assert not pairs(ids[:1], ids[:1], labels[:1], labels[:1]).changed.any()


def test_counting_hand_worked_pairs():
    task = make("counting")
    a = task.alphabet
    model = MODELS["up_down"](a)
    base = ["B", "D0", "D1", "D2", "T", "R", "R", "R", "E"]  # count 3
    rows = []
    for value in (1, 3):  # `count` after base position 6 (two responses): 1 unchanged, 3 not
        source = ["B"] + ["D0"] * value + ["T"] + ["R"] * value + ["E"]
        cf, nxt, scored = model.intervene(base, 6, source, value, ("count",))
        _, plain = model.run(cf, obj_count=3)
        cf_lab = [task.encode([t])[0] if s else IGNORE for t, s in zip(nxt, scored)]
        base_lab = [task.encode([t])[0] if s else IGNORE for t, s in zip(plain, scored)]
        pad = task.seq_len - len(cf)
        rows.append((task.encode(cf) + [0] * pad, cf_lab + [IGNORE] * pad,
                     base_lab + [IGNORE] * pad))
    ids = np.array([r[0] for r in rows])
    got = pairs(ids, ids, np.array([r[2] for r in rows]), np.array([r[1] for r in rows]))
    assert got.changed.tolist() == [False, True]


# --- Pairs.changed: generated pairs -----------------------------------------------------------
def test_generated_pairs_of_every_task_carry_the_flag():
    b = make("binding")
    assert b.counterfactuals("root_value", 40).changed.all()
    assert b.counterfactuals("query", 40).changed.all()
    assert not b.counterfactuals("distractor", 40).changed.any()
    aa = make("assign_add")
    for kind in aa.counterfactual_kinds:  # every kind moves the answer
        assert aa.counterfactuals(kind, 40).changed.all(), kind
    c = make("counting")
    p = c.counterfactuals("up_down:count", 200, seed=1)
    nb, pos, phase = p.strata["count"], p.base_pos, p.strata["base_phase"]
    own = np.where(phase == 0, pos, 2 * nb + 1 - pos)  # the base's count after base_pos
    # an interchanged count changes the output exactly when it differs from the base's own
    assert (p.changed == (p.strata["value"] != own)).all()
    assert p.changed.any() and not p.changed.all()


# --- views on hand-written sequences ---------------------------------------------------------
def test_binding_views_follow_the_program():
    task = make("binding")
    ids = np.array([task.encode(list("a=3\nb=a\nc=5\nd=b\n#d:"))])
    v = task.probe_variables(ids)
    assert (v["root_value"][0] == 3).all()
    assert v["line_value"][0].tolist() == [3] * 4 + [3] * 4 + [5] * 4 + [3] * 4 + [3] * 3
    t = task.attention_targets(ids)
    query, chain = t["chain"]
    assert np.flatnonzero(query[0]).tolist() == [18]  # the `:`
    assert np.flatnonzero(chain[0]).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15]
    assert np.flatnonzero(t["root"][1][0]).tolist() == [2]
    assert np.flatnonzero(t["query_line"][1][0]).tolist() == [12, 13, 14, 15]


def test_assign_add_views_and_progress_facts():
    task = make("assign_add")
    ids = np.array([task.encode("PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + a 27 =".split())])
    v = task.probe_variables(ids)
    assert v["x"][0, -1] == 40 and v["y"][0, -1] == 27 and v["sum"][0, -1] == 8
    assert np.flatnonzero(v["var_of_num"][0] >= 0).tolist() == [3, 6, 11]
    assert v["var_of_num"][0, [3, 6, 11]].tolist() == [0, 9, 10]  # a, j, k
    t = task.attention_targets(ids)
    assert np.flatnonzero(t["values"][1][0]).tolist() == [3, 14]  # a's value, the number 27
    assert np.flatnonzero(t["operands"][1][0]).tolist() == [13, 14]
    f = task.progress_measures()
    assert f.modulus == 59 and f.prefix_len == 12 and len(f.variable_ids) == 12
    assert set(f.topk_targets) <= set(t) and set(f.probes.values()) <= set(v)
    assert task.stratum_label("pool", 1) == "pool=var0_heldout"
    assert task.stratum_label("form", np.int64(2)) == "form=2"


def test_counting_views():
    task = make("counting")
    ids = np.array([task.encode("B D0 D1 T R R E".split()) + [0] * (task.seq_len - 7)])
    v = task.probe_variables(ids)
    assert v["up_down:count"][0, :7].tolist() == [0, 1, 2, 2, 1, 0, 0]
    t = task.attention_targets(ids)
    query, trig = t["trigger"]
    assert np.flatnonzero(query[0]).tolist() == [3, 4, 5]  # T and the responses
    assert np.flatnonzero(trig[0]).tolist() == [3]
    assert np.flatnonzero(t["demos"][1][0]).tolist() == [1, 2]


@pytest.mark.parametrize("name", list(registry.builtin("task")))
def test_declared_probe_variable_names_are_what_the_task_gives(name):
    """`probes.variables` is checked against the declared names before any data exists; the
    names must be exactly the variables the task then gives on real data."""
    task = make(name)
    ex = task.split("test").take(slice(0, 16))
    got = task.probe_variables(np.asarray(ex.ids, np.int64), np.asarray(ex.labels, np.int64))
    assert tuple(got) == tuple(task.probe_variable_names)


@pytest.mark.parametrize("name", list(registry.builtin("task")))
def test_every_das_variables_pairs_carry_the_value_the_source_gives_it(name):
    """DAS's shuffled control matches pairs by the `value` stratum, asked of every task alike:
    each variable's pairs carry one integer per pair, with several values to shuffle among."""
    from study.analyses.das import das_variables
    from study.analyses.das.controls import value_keys

    task = make(name)
    for variable in das_variables(task):
        p = task.counterfactuals(variable, 60, seed=2)
        value = value_keys(p)
        assert value.shape == (len(p),) and len(np.unique(value)) > 1, variable
    with pytest.raises(ValueError, match="carry no `value` stratum"):
        value_keys(pairs([[1]], [[2]], [[1]], [[2]]))
