"""Task `counting`: data, labels, splits, causal models, counterfactual pairs, presets."""
from __future__ import annotations

import numpy as np
import pytest

from study.core import registry
from study.core.errors import UsageError
from study.train.config import TrainConfig
from study.tasks.base import IGNORE
from study.tasks.counting import CountingConfig, CountingTask
from study.tasks.counting.causal import MODELS, CtxDistr, UpDown, UpUp
from study.tasks.counting.vocab import VARIANTS, Alphabet

SINGLE = Alphabet(demo=("D",), resp="R")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path / "cache"))


def make(scale="paper", **over) -> CountingTask:
    """A counting task; without void tokens unless `void_p` is given (the layout tests)."""
    entry = registry.get("task", "counting")
    return entry.obj(entry.make_config(scale, {"void_p": 0.0, **over}))


def seq(text: str) -> list[str]:
    return text.split()


def check_labels_by_program(task, row, lab, n) -> None:
    """One sequence's labels are what the task's own program (Up-Down) predicts: the n
    responses and `E`, scored from the trigger through the last response."""
    vocab = task.vocab
    toks = [vocab[i] for i in row if i != task.pad_id]
    t = toks.index(task.alphabet.trig)
    assert task.label_of(lab) == [task.alphabet.resp] * n + ["E"]
    assert np.flatnonzero(lab != IGNORE).tolist() == list(range(t, t + n + 1))
    preds = task.causal_model("up_down").run(toks)[1]
    assert all(preds[p] == vocab[lab[p]] for p in range(t, t + n + 1))


# --- data ----------------------------------------------------------------------------------
def test_held_out_counts_only_in_heldout_split():
    task = make()
    held = {4, 9, 14, 17}
    for split in ("train", "val", "test"):
        counts = set(task.split(split).strata["count"].tolist())
        assert not counts & held, split
        assert counts == set(range(1, 21)) - held, split  # every trained count is drawn
    assert set(task.split("heldout").strata["count"].tolist()) == held
    assert task.split("heldout").strata["held_out"].all()
    assert not task.split("train").strata["held_out"].any()


@pytest.mark.parametrize("variant", VARIANTS)
def test_sequences_are_well_formed(variant):
    task = make(variant=variant)
    demo = {"D0", "D1", "D2"} if variant == "multi_object" else {"D"}
    resp = "D" if variant == "same_object" else "R"
    ex = task.split("test")
    assert ex.ids.shape == (task.config.n_test, 43) == (len(ex), task.seq_len)
    assert (ex.strata["variant"] == VARIANTS.index(variant)).all()
    seen_demo = set()
    for row, n in zip(ex.ids[:300], ex.strata["count"][:300]):
        toks = [task.vocab[i] for i in row]
        assert toks[0] == "B" and toks[n + 1] == "T" and toks[2 * n + 2] == "E"
        assert set(toks[1:n + 1]) <= demo
        seen_demo |= set(toks[1:n + 1])
        assert toks[n + 2:2 * n + 2] == [resp] * n
        assert toks[2 * n + 3:] == ["PAD"] * (43 - 2 * n - 3)
    assert seen_demo == demo  # multi_object really mixes its three demo tokens


def test_labels_are_responses_then_eos():
    task = make(variant="multi_object")
    ex = task.split("train")
    for row, lab, n in zip(ex.ids[:200], ex.labels[:200], ex.strata["count"][:200]):
        assert task.label_of(lab) == ["R"] * n + ["E"]
        scored = np.flatnonzero(lab != IGNORE)
        assert scored.tolist() == list(range(n + 1, 2 * n + 2))  # from T to the last response
        assert (lab[scored] == row[scored + 1]).all()


def test_render_and_label_of():
    task = make()
    ids = np.array(task.encode(seq("B D0 D2 T R R E")) + [task.pad_id] * 36)
    assert task.render(ids) == "B D0 D2 T R R E"
    labels = np.full(43, IGNORE)
    labels[3:6] = task.encode(["R", "R", "E"])
    assert task.label_of(labels) == ["R", "R", "E"]
    assert task.vocab[task.pad_id] == "PAD"
    assert task.vocab == make(variant="same_object").vocab  # one vocabulary for every variant


def test_data_is_deterministic_and_seeded(tmp_path, monkeypatch):
    a = make().split("train")
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path / "other"))  # regenerate, not reload
    b = make().split("train")
    c = make(seed=1).split("train")
    assert (a.ids == b.ids).all() and (a.labels == b.labels).all()
    assert not (a.ids == c.ids).all()
    assert not (make().split("val").ids[:100] == a.ids[:100]).all()


# --- causal models, hand-worked ------------------------------------------------------------
BASE = seq("B D D D T R R R E")  # count 3; positions 0..8
BASE_TEXT = " ".join(BASE)


def cf(model, base_pos, source, source_pos, variables):
    toks, nxt, scored = model(SINGLE).intervene(BASE, base_pos, seq(source), source_pos, variables)
    labels = [n for t, (n, s) in enumerate(zip(nxt, scored)) if s and t >= base_pos]
    return " ".join(toks), labels


def test_up_down_count_interventions_by_hand():
    # count 1 copied at T: one response, then E
    assert cf(UpDown, 4, "B D T R E", 1, ("count",)) == ("B D D D T R E", ["R", "E"])
    # count 5 after the first response: five more responses
    assert cf(UpDown, 5, "B D D D D D T R R R R R E", 5, ("count",)) == (
        "B D D D T R R R R R R E", ["R"] * 5 + ["E"])
    # count 0 (source's last response) after the first response: stop now
    assert cf(UpDown, 5, "B D D T R R E", 5, ("count",)) == ("B D D D T R E", ["E"])
    # demo phase, count 2 after the first demo: one more demo reaches the base's 3, T, 3 R
    assert cf(UpDown, 1, "B D D T R R E", 2, ("count",)) == ("B D D T R R R E",
                                                             ["R", "R", "R", "E"])
    # demo phase, count 5 >= 3: trigger at once, five responses
    assert cf(UpDown, 1, "B D D D D D T R R R R R E", 5, ("count",)) == (
        "B D T R R R R R E", ["R"] * 5 + ["E"])
    # phase copied from a response position into the demo phase: respond without a T
    assert cf(UpDown, 2, "B D T R E", 3, ("phase",)) == ("B D D R R E", ["R", "R", "E"])


def test_up_up_interventions_by_hand():
    # resp_count 0 (any demo-phase source) after the first response: three more responses
    assert cf(UpUp, 5, "B D D T R R E", 2, ("resp_count",)) == ("B D D D T R R R R E",
                                                                ["R", "R", "R", "E"])
    # demo_count 1 after two responses: resp > demo, so E at once, unscored as the authors'
    assert cf(UpUp, 6, "B D T R E", 1, ("demo_count",)) == ("B D D D T R R E", [])
    # demo_count 2 after two responses: resp == demo, a scored E
    assert cf(UpUp, 6, "B D D T R E", 2, ("demo_count",)) == ("B D D D T R R E", ["E"])
    # demo_count 5 after one response: four more
    assert cf(UpUp, 5, "B D D D D D T R E", 5, ("demo_count",)) == (
        "B D D D T R R R R R E", ["R"] * 4 + ["E"])


def test_ctx_distr_intervention_lives_one_step():
    # count 0 at the first response: E right there
    assert cf(CtxDistr, 5, "B D D T R R E", 5, ("count",)) == ("B D D D T R E", ["E"])
    # count 5 at the last response: one extra R, then the context says -1 -> E
    assert cf(CtxDistr, 7, "B D D D D D T R E", 5, ("count",)) == (
        "B D D D T R R R R E", ["R", "E"])
    # the same swap in Up-Down carries the count on: five more responses
    assert cf(UpDown, 7, "B D D D D D T R E", 5, ("count",)) == (
        "B D D D T R R R R R R R R E", ["R"] * 5 + ["E"])
    # demo phase, count 2 < 3: no visible effect (recomputed before anything is scored)
    assert cf(CtxDistr, 1, "B D D T R R E", 2, ("count",)) == (BASE_TEXT, ["R", "R", "R", "E"])



def test_same_object_counts_d_up_then_down():
    same = Alphabet(demo=("D",), resp="D")
    # count 0 (the source's response) after the first response: stop
    toks, _, _ = UpDown(same).intervene(seq("B D D T D D E"), 4, seq("B D T D E"), 3, ("count",))
    assert " ".join(toks) == "B D D T D E"
    states, preds = UpDown(same).run(seq("B D D T D D E"))
    assert [s["count"] for s in states] == [0, 1, 2, 2, 1, 0, 0]
    assert preds[3:6] == ["D", "D", "E"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_programs_agree_unintervened_and_identity_swap_is_a_no_op(variant):
    task = make(variant=variant)
    ex = task.split("val")
    vocab = task.vocab
    for row, lab in zip(ex.ids[:60], ex.labels[:60]):
        toks = [vocab[i] for i in row if i != task.pad_id]
        runs = [task.causal_model(m).run(toks)[1] for m in MODELS]
        assert runs[0] == runs[1] == runs[2]
        for t in np.flatnonzero(lab != IGNORE):
            assert runs[0][t] == vocab[lab[t]]
        for name, model in MODELS.items():
            for pos in (1, len(toks) - 2):
                out, _, _ = model(task.alphabet).intervene(toks, pos, toks, pos, model.variables)
                assert out[len(toks) // 2:] == toks[len(toks) // 2:] and len(out) == len(toks)


# --- counterfactual pairs ---------------------------------------------------------------
@pytest.mark.parametrize("kind", CountingTask.counterfactual_kinds)
def test_pairs_are_consistent(kind):
    task = make(variant="multi_object")
    p = task.counterfactuals(kind, 150, split="train", seed=0)
    assert len(p) == 150 and p.kind == kind
    assert p.base_ids.shape == p.source_ids.shape == p.cf_labels.shape == (150, 43)
    drawn = set(p.strata["count"].tolist()) | set(p.strata["source_count"].tolist())
    assert drawn <= set(range(1, 21))  # the authors' DAS data: every count 1-20
    vocab = task.vocab
    for i in range(len(p)):
        bp, sp = p.base_pos[i], p.source_pos[i]
        assert vocab[p.base_ids[i, bp]] in {"D0", "D1", "D2", "R"}
        assert vocab[p.source_ids[i, sp]] in {"D0", "D1", "D2", "R"}
        scored = np.flatnonzero(p.cf_labels[i] != IGNORE)
        assert len(scored) and scored.min() >= bp
        # base_ids holds the counterfactual continuation: cf labels are its next tokens
        assert (p.cf_labels[i, scored] == p.base_ids[i, scored + 1]).all()
        if kind.endswith("_next"):  # the next prediction only: the one made at base_pos
            assert scored.tolist() == [bp]
        else:
            assert vocab[p.cf_labels[i, scored[-1]]] == "E"
        assert set(np.flatnonzero(p.base_labels[i] != IGNORE)) <= set(scored)
        # the source's own labels: what the task labels that sequence with
        check_labels_by_program(task, p.source_ids[i], p.source_labels[i],
                                p.strata["source_count"][i])
    assert p.changed.any()


def test_pair_counts_all_or_trained():
    held = set(CountingConfig().held_out)
    every = make().counterfactuals("up_down:count", 300, split="test")
    drawn = set(every.strata["count"].tolist()) | set(every.strata["source_count"].tolist())
    assert drawn & held  # held-out counts are drawn, as in the authors' DAS data
    trained = make(cf_counts="trained").counterfactuals("up_down:count", 300, split="test")
    drawn = set(trained.strata["count"].tolist()) | set(trained.strata["source_count"].tolist())
    assert not drawn & held


def test_heldout_pairs_use_held_out_counts_and_pairs_are_pure():
    task = make()
    p = task.counterfactuals("up_down:count", 100, split="heldout", seed=3)
    assert set(p.strata["count"].tolist()) <= {4, 9, 14, 17}
    q = make().counterfactuals("up_down:count", 100, split="heldout", seed=3)
    r = task.counterfactuals("up_down:count", 100, split="heldout", seed=4)
    assert (p.base_ids == q.base_ids).all() and (p.cf_labels == q.cf_labels).all()
    assert (p.base_pos == q.base_pos).all() and (p.source_ids == q.source_ids).all()
    assert not (p.base_ids == r.base_ids).all()


def test_up_down_count_pair_labels_follow_the_source_value():
    task = make(variant="single_object")
    p = task.counterfactuals("up_down:count", 200, split="test")
    resp_phase = p.strata["base_phase"] == 1
    assert resp_phase.any()
    for i in np.flatnonzero(resp_phase):  # response phase: exactly `value` more responses
        lab = task.label_of(p.cf_labels[i])
        assert lab == ["R"] * p.strata["value"][i] + ["E"]


def test_count_next_labels_are_the_causal_models_next_prediction():
    """`ctx_distr:count_next` scores only the prediction at the intervened position, and its
    label is what the program predicts there with the source's count: the count counted by
    hand in the source (demos before `T` minus the responses read up to source_pos), a
    response while it is positive, `E` at 0; the base label is the base's own prediction."""
    task = make(variant="multi_object")
    p = task.counterfactuals("ctx_distr:count_next", 300, split="test", seed=2)
    full = task.counterfactuals("ctx_distr:count", 300, split="test", seed=2)
    vocab = task.vocab
    for i in range(len(p)):
        bp, sp = int(p.base_pos[i]), int(p.source_pos[i])
        base = [vocab[t] for t in p.base_ids[i, :bp + 1]]
        src = [vocab[t] for t in p.source_ids[i] if t != task.pad_id]
        assert "T" in base  # the response phase, where the prediction is scored

        def count(toks):
            t = toks.index("T") if "T" in toks else len(toks)
            return sum(x.startswith("D") for x in toks[:t]) - toks[t:].count("R")
        value = count(src[:sp + 1])
        assert p.strata["value"][i] == value
        want = "R" if value > 0 else "E"
        assert np.flatnonzero(p.cf_labels[i] != IGNORE).tolist() == [bp]
        assert vocab[p.cf_labels[i, bp]] == want
        assert vocab[p.base_labels[i, bp]] == ("R" if count(base) > 0 else "E")
        # the program's own intervention agrees
        _, nxt, _ = CtxDistr(task.alphabet).intervene(base, bp, src, sp, ("count",))
        assert nxt[bp] == want
    # scored on one position, a pair changes where the swap crosses zero: a quarter or so,
    # and twice ctx_distr:count's share, whose pairs include unscored demo positions
    assert 0.15 < p.changed.mean() < 0.4 and p.changed.mean() > full.changed.mean()


def test_variable_values():
    task = make(variant="single_object")
    ids = np.array([task.encode(BASE) + [task.pad_id] * 34])
    v = task.variable_values(ids)
    assert v["up_down:count"][0, :9].tolist() == [0, 1, 2, 3, 3, 2, 1, 0, 0]
    assert v["up_up:resp_count"][0, :9].tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 3]
    assert v["up_down:phase"][0, :9].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert (v["ctx_distr:count"] == v["up_down:count"]).all()
    assert (v["up_down:count"][0, 9:] == -1).all()


# --- heuristics, presets, errors ----------------------------------------------------------
def test_heuristics_rows():
    task = make()
    rows = task.heuristics("test")
    counts = task.split("test").strata["count"]
    by = {(r["heuristic"], r["stratum"], r["value"]): r for r in rows}
    assert {r["heuristic"] for r in rows} == {"modal_count", "subitize_3", "distinct_demo_types"}
    assert by[("subitize_3", "count", 3)]["accuracy"] == 1.0
    assert by[("subitize_3", "count", 5)]["accuracy"] == 0.0
    assert by[("subitize_3", "all", "all")]["accuracy"] == pytest.approx(np.mean(counts <= 3))
    modal = by[("modal_count", "all", "all")]
    assert modal["n"] == len(counts) and modal["accuracy"] < 0.2  # no shortcut solves it


@pytest.mark.parametrize("variant", VARIANTS)
def test_void_tokens_interleave_the_demo_phase(variant):
    task = make(variant=variant, void_p=0.2)
    assert task.seq_len == 63
    ex = task.split("val")
    vocab, demo = task.vocab, set(task.alphabet.demo)
    voids = real = 0
    for row, lab, n in zip(ex.ids[:300], ex.labels[:300], ex.strata["count"][:300]):
        toks = [vocab[i] for i in row if i != task.pad_id]
        t = toks.index("T")
        assert toks[0] == "B" and set(toks[1:t]) <= demo | {"U"}
        assert sum(x in demo for x in toks[1:t]) == n  # voids count for nothing
        assert toks[t + 1:] == [task.alphabet.resp] * n + ["E"]
        voids, real = voids + toks[1:t + 1].count("U"), real + n + 1
        check_labels_by_program(task, row, lab, n)
    assert 0.17 < voids / (voids + real) < 0.23  # each demo-phase step is a void w.p. 0.2
    trig, demos = task.attention_targets(ex.ids[:50])["demos"]
    assert not (np.asarray(ex.ids[:50]) == vocab.index("U"))[demos].any()
    pairs = task.counterfactuals("up_down:count", 50, split="test")
    assert not (pairs.base_ids == vocab.index("U")).any()  # DAS data has no voids [authors]


def test_paper_preset_has_voids_for_every_model():
    entry = registry.get("task", "counting")
    assert entry.make_config("paper").void_p == 0.2
    assert entry.make_config("small").void_p == entry.make_config("smoke").void_p == 0.0


@pytest.mark.parametrize("scale", registry.SCALES)
def test_presets_build(scale):
    task = make(scale)
    TrainConfig(**CountingTask.train_presets[scale])
    assert task.seq_len == 43
    if scale == "smoke":
        assert len(task.split("train")) == 64
        assert len(task.counterfactuals("up_up:full", 32)) == 32


@pytest.mark.parametrize("over, key", [
    ({"variant": "foo"}, "task.variant"),
    ({"held_out": (4, 25)}, "task.held_out"),
    ({"held_out": ()}, "task.held_out"),
    ({"max_count": 0}, "task.max_count"),
    ({"void_p": 1.0}, "task.void_p"),
    ({"cf_counts": "some"}, "task.cf_counts"),
    ({"n_train": 0}, "task.n_train"),
])
def test_bad_config_names_the_key(over, key):
    with pytest.raises(UsageError, match=key) as err:
        CountingConfig(**over)
    if key == "task.variant":
        assert all(v in str(err.value) for v in VARIANTS)


def test_bad_kind_and_split():
    task = make("smoke")
    with pytest.raises(UsageError, match="up_down:count"):
        task.counterfactuals("up_down:size", 4)
    with pytest.raises(UsageError, match="heldout"):
        task.counterfactuals("up_down:count", 4, split="nope")


def test_every_pair_of_every_kind_has_its_roles_and_a_sequence_without_trigger_has_none():
    """The atlas reads each pair at its roles (`CountingTask.roles`): the demonstration steps
    before the trigger, the trigger, the responses before the end. An intervention on the
    phase can generate a sequence with neither trigger nor end: every role is -1 there (the
    pair is left out of every cell), and no kind of pair is refused."""
    from study.tasks.counting.vocab import ID
    task = CountingTask(CountingConfig(n_train=64, n_val=32, n_test=32))
    seen_whole = seen_broken = False
    for kind in task.counterfactual_kinds:
        pairs = task.counterfactuals(kind, 200, split="train", seed=0)
        for ids in (pairs.base_ids, pairs.source_ids):
            roles = task.roles(ids)
            whole = (ids == ID["T"]).any(1) & (ids == ID["E"]).any(1)
            for name, pos in roles.items():
                assert ((pos >= 0) <= whole).all(), (kind, name)
            rows = np.arange(len(ids))[whole]
            trig = roles["trigger"][whole]
            assert (ids[rows, trig] == ID["T"]).all()
            seen_whole |= bool(whole.any())
            seen_broken |= bool((~whole).any())
    assert seen_whole and seen_broken


@pytest.mark.parametrize("role", ["demo@2", "trigger", "response@1", "response@3"])
def test_pairs_drawn_at_a_role_are_intervened_there_in_the_base(role):
    """The atlas's counting cells (`role_counterfactuals`): each pair's intervention is at the
    role in its base, so its label is that intervention's, the source read where pairs are
    always read (so that at a demonstration step, where the count is the step, enough pairs
    change it); the same draw gives the same pairs, and a `_next` kind has none at a
    demonstration step (its one scored prediction is a response's)."""
    task = CountingTask(CountingConfig(n_train=64, n_val=32, n_test=32))
    pairs = task.role_counterfactuals("up_down:count", 100, role, split="test", seed=1)
    assert len(pairs) == 100
    nb, ns = pairs.strata["count"], pairs.strata["source_count"]
    name, _, i = role.partition("@")
    want = {"demo": lambda n: np.full(len(n), int(i or 0)), "trigger": lambda n: n + 1,
            "response": lambda n: n + 1 + int(i or 0)}[name]
    assert (pairs.base_pos == want(nb)).all()
    assert (pairs.source_pos != want(ns)).any()  # the source is read anywhere
    assert pairs.changed.mean() > 0.5  # the intervention changes most pairs' outputs
    again = task.role_counterfactuals("up_down:count", 100, role, split="test", seed=1)
    assert (again.base_ids == pairs.base_ids).all()
    nxt = task.role_counterfactuals("ctx_distr:count_next", 20, role, split="test", seed=1)
    assert (len(nxt) == 0) == (name == "demo")  # the prediction at T is a response
