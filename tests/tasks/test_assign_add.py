"""Task `assign_add`: sequences, held-out pairs and positions, pools, counterfactuals.

Labels and pool contents are checked by re-parsing the rendered tokens with a small
interpreter written here, independent of the generator."""
from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from study.core import registry
from study.core.errors import UsageError
from study.train.config import TrainConfig
from study.tasks.assign_add import AssignAddConfig, AssignAddTask
from study.tasks.assign_add.generate import EXTRA_POOLS, NINE_POOLS
from study.tasks.base import IGNORE

P = 59
NEVER_RIGHT, NEVER_LEFT = {"a", "b"}, {"k", "l"}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path))


@pytest.fixture(scope="module")
def task():
    return AssignAddTask(AssignAddConfig(pool_size=300, n_train=1000, n_val=300))


def parse(text: str) -> dict:
    """Interpret one rendered sequence, asserting it is well formed."""
    tokens = text.split()
    assert len(tokens) == 16
    assert tokens[12] == "+" and tokens[15] == "=" and "=" not in tokens[:12]
    env, order, pads, i = {}, [], 0, 0
    while i < 12:
        if tokens[i] == "PAD":
            pads, i = pads + 1, i + 1
            continue
        var, value = tokens[i], tokens[i + 1]
        assert len(var) == 1 and "a" <= var <= "l", text
        assert value.isdigit() and 0 <= int(value) < P, text
        assert var not in env, f"{var} assigned twice: {text}"
        env[var], i = int(value), i + 2
        order.append(var)
    assert 1 <= len(env) <= 6 and pads == 12 - 2 * len(env), text
    lhs, rhs = tokens[13], tokens[14]
    for t in (lhs, rhs):
        assert t.isdigit() or t in env, f"operand {t} unassigned: {text}"
    val = lambda t: int(t) if t.isdigit() else env[t]  # noqa: E731
    n_vars = (not lhs.isdigit()) + (not rhs.isdigit())
    form = {(True, True): 0, (False, True): 1, (True, False): 2, (False, False): 3}[
        (lhs.isdigit(), rhs.isdigit())]
    if form == 3:
        assert lhs != rhs and len(env) >= 2
    restricted = int(lhs in NEVER_LEFT) + int(rhs in NEVER_RIGHT)
    return dict(env=env, order=order, lhs=lhs, rhs=rhs, x=val(lhs), y=val(rhs), n=len(env),
                n_vars=n_vars, form=form, restricted=restricted, tokens=tokens)


def authors_heldout(seed=42):
    """The authors' split (eval_pools.compute_sel_pairs) with TRAIN_PAIRS_FRAC = 0.7."""
    pool = [(a, b) for a in range(P) for b in range(P)]
    kept = set(random.Random(seed).sample(pool, math.floor(0.7 * P * P)))
    return {pr for pr in pool if pr not in kept}


HELDOUT = authors_heldout()


def check_examples(task, ex):
    """Labels by re-parsing; strata agree with the parse; returns the parses."""
    out = []
    assert ex.ids.shape[1] == 16 and (ex.labels[:, :-1] == IGNORE).all()
    for i in range(len(ex)):
        r = parse(task.render(ex.ids[i]))
        assert task.label_of(ex.labels[i]) == (r["x"] + r["y"]) % P
        assert ex.strata["n_vars"][i] == r["n_vars"] and ex.strata["form"][i] == r["form"]
        assert ex.strata["n_assign"][i] == r["n"]
        assert ex.strata["pair_held_out"][i] == ((r["x"], r["y"]) in HELDOUT)
        assert ex.strata["n_restricted"][i] == r["restricted"]
        assert ex.strata["position_restricted"][i] == (r["restricted"] > 0)
        out.append(r)
    return out


def test_spec_example_vocab_and_causal_model(task):
    assert len(task.vocab) == 74 and task.vocab[:3] == ("0", "1", "2")
    assert task.vocab[59:62] == ("+", "=", "PAD") and task.vocab[-1] == "l"
    text = "PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + a 27 ="
    ids = np.array([task.encode(text.split())])
    assert task.render(ids[0]) == text
    x, y = task.operands(ids)
    assert (x[0], y[0]) == (40, 27) and (x[0] + y[0]) % P == 8
    # hand-worked counterfactual sources of this base (target: the left operand `a`)
    for source, cf in [
            ("PAD PAD a 5 PAD j 18 PAD PAD PAD k 9 + a 3 =", (5 + 27) % P),  # lhs_value
            ("PAD PAD a 18 PAD j 40 PAD PAD PAD k 9 + a 1 =", (18 + 27) % P),  # binding
            ("PAD PAD a 40 PAD j 18 PAD PAD PAD k 9 + j 2 =", (18 + 27) % P)]:  # operand_var
        sx, _ = task.operands(np.array([task.encode(source.split())]))
        assert (sx[0] + y[0]) % P == cf


def test_authors_heldout_pairs(task):
    held = {(a, b) for a in range(P) for b in range(P) if task.held[a, b]}
    assert held == HELDOUT
    assert abs(len(held) / P ** 2 - 0.3) < 0.01
    other = AssignAddTask(AssignAddConfig(seed=7))
    assert abs(other.held.mean() - 0.3) < 0.01 and (other.held != task.held).any()


def test_train_val_and_pools_labels_and_form(task):
    for ex in (task.train_batch(0, 512), task.split("train"), task.split("val")):
        check_examples(task, ex)
    for name in (*NINE_POOLS, *EXTRA_POOLS):
        check_examples(task, task.split(name))


def test_training_never_shows_heldout_pairs_or_restricted_positions(task):
    forms, n2 = np.zeros(4), []
    for step in range(120):
        ex = task.train_batch(step, 512)
        x, y = task.operands(ex.ids)
        lhs = [task.vocab[t] for t in ex.ids[:, 13]]
        rhs = [task.vocab[t] for t in ex.ids[:, 14]]
        assert not any((a, b) in HELDOUT for a, b in zip(x.tolist(), y.tolist()))
        assert not NEVER_LEFT & set(lhs) and not NEVER_RIGHT & set(rhs)
        forms += np.bincount(ex.strata["form"], minlength=4)
        n2.append(ex.strata["n_assign"][ex.strata["form"] == 3] == 2)
    # [paper] uniform over the authors' (variable, form, pair) rows: 12 : 10 : 10 : 10
    assert np.allclose(forms / forms.sum(), np.array([12, 10, 10, 10]) / 42, atol=0.01)
    assert abs(np.concatenate(n2).mean() - 1 / 3) < 0.02  # 2-var n clamped up to 2


def test_pools_contain_what_their_names_say(task):
    for name in (*NINE_POOLS, *EXTRA_POOLS):
        parts = name.split("_")
        ex = task.split(name)
        rows = check_examples(task, ex)
        assert len(rows) == 300
        for r in rows:
            assert r["n_vars"] == int(parts[0][3])
            assert ((r["x"], r["y"]) in HELDOUT) == (parts[1] == "heldout")
            want = parts[2] if len(parts) > 2 else "allowed"
            ok = {"allowed": r["restricted"] == 0, "restricted": r["restricted"] >= 1,
                  "restricted1": r["restricted"] == 1, "restricted2": r["restricted"] == 2}
            assert ok[want], (name, " ".join(r["tokens"]))
        if parts[0] != "var0":  # both 1-var forms / several variables are represented
            assert len({r["form"] for r in rows}) == (2 if parts[0] == "var1" else 1)
            assert len({r["lhs"] + r["rhs"] for r in rows}) > 3
    n2 = task.split("var2_seen_allowed").strata["n_assign"]
    assert n2.min() == 2 and abs((n2 == 2).mean() - 0.2) < 0.08  # [paper] uniform on 2..6


def test_test_split_is_the_nine_pools_stacked(task):
    test = task.split("test")
    for i, name in enumerate(NINE_POOLS):
        sel = test.strata["pool"] == i
        assert np.array_equal(test.ids[sel], task.split(name).ids)
    # the stacked test split is scored too: the report and the heuristics compare against it
    assert set(task.eval_splits) == {"val", "test", *NINE_POOLS} and len(NINE_POOLS) == 9


def test_train_batch_is_a_pure_function_of_config_and_step():
    a = AssignAddTask(AssignAddConfig())
    b = AssignAddTask(AssignAddConfig())
    assert np.array_equal(a.train_batch(7, 64).ids, b.train_batch(7, 64).ids)
    assert np.array_equal(a.train_batch(7, 64).labels, b.train_batch(7, 64).labels)
    assert not np.array_equal(a.train_batch(7, 64).ids, a.train_batch(8, 64).ids)
    c = AssignAddTask(AssignAddConfig(seed=1))
    assert not np.array_equal(a.train_batch(7, 64).ids, c.train_batch(7, 64).ids)


@pytest.mark.parametrize("kind", ["lhs_value", "rhs_value", "binding", "operand_var"])
@pytest.mark.parametrize("split", ["train", "test", "var1_seen_restricted",
                                   "var2_seen_restricted2", "var2_heldout_restricted"])
def test_counterfactual_labels_by_reparsing(task, kind, split):
    pairs = task.counterfactuals(kind, 150, split, seed=3)
    assert len(pairs) == 150 and (pairs.base_pos == -1).all() and (pairs.source_pos == -1).all()
    for i in range(len(pairs)):
        b = parse(task.render(pairs.base_ids[i]))
        s = parse(task.render(pairs.source_ids[i]))
        right = bool(pairs.strata["operand"][i])
        if kind in ("lhs_value", "rhs_value"):
            assert right == (kind == "rhs_value")
        t = (lambda r: r["y"]) if right else (lambda r: r["x"])
        o = (lambda r: r["x"]) if right else (lambda r: r["y"])
        cf = task.label_of(pairs.cf_labels[i])
        assert cf == (t(s) + o(b)) % P
        assert task.label_of(pairs.base_labels[i]) == (b["x"] + b["y"]) % P
        # the target and the other operand both change; the cf label is neither label
        assert t(s) != t(b) and o(s) != o(b)
        assert cf != (b["x"] + b["y"]) % P and cf != (s["x"] + s["y"]) % P
        # the same pool: held-out status of base, source and cf pairs; restricted positions
        cf_pair = (o(b), t(s)) if right else (t(s), o(b))
        status = (b["x"], b["y"]) in HELDOUT
        assert ((s["x"], s["y"]) in HELDOUT) == status == (cf_pair in HELDOUT)
        assert s["restricted"] == b["restricted"] and s["form"] == b["form"]
        # aligned: same layout; only value tokens or the target operand token differ
        # aligned: same layout and variables; only value tokens differ (and, for
        # operand_var, the target operand's variable token)
        diff = [j for j in range(16) if b["tokens"][j] != s["tokens"][j]]
        assert b["order"] == s["order"]
        assert len(diff) == {"binding": 3}.get(kind, 2)
        var_pos = [13 + right] if kind == "operand_var" else []
        assert all(b["tokens"][j].isdigit() and s["tokens"][j].isdigit()
                   for j in diff if j not in var_pos)
        target_tok = s["rhs"] if right else s["lhs"]
        if kind == "binding":
            assert target_tok.isalpha()
            swapped = [v for v in b["env"] if b["env"][v] != s["env"][v]]
            moved = [v for v in swapped if v not in (b["lhs"], b["rhs"])]
            assert len(moved) == 1 and s["env"][moved[0]] == t(b) and b["env"][moved[0]] == t(s)
        if kind == "operand_var":
            old_tok = b["rhs"] if right else b["lhs"]
            assert target_tok != old_tok and b["env"][target_tok] == t(s)
            assert 13 + right in diff
        pos = int(pairs.strata["value_pos"][i])
        assert int(s["tokens"][pos]) == t(s)


def test_counterfactuals_pure_and_validated(task):
    a = task.counterfactuals("x", 40, "val", seed=1)
    b = task.counterfactuals("lhs_value", 40, "val", seed=1)
    assert np.array_equal(a.base_ids, b.base_ids) and np.array_equal(a.cf_labels, b.cf_labels)
    c = task.counterfactuals("lhs_value", 40, "val", seed=2)
    assert not np.array_equal(a.base_ids, c.base_ids)
    with pytest.raises(UsageError, match="variable operands"):
        task.counterfactuals("binding", 10, "var0_seen")
    with pytest.raises(UsageError, match="kind="):
        task.counterfactuals("sum", 10, "val")


def test_heuristics_are_honest_shortcuts(task):
    rows = task.heuristics("test")
    acc = {(r["heuristic"], r["stratum"], r["value"]): r["accuracy"] for r in rows}
    pools = list(NINE_POOLS)
    assert acc[("ignore_variables", "pool", "var0_seen")] == 1.0
    assert acc[("ignore_variables", "pool", "var2_seen_allowed")] < 0.1
    assert acc[("seen_pair_lookup", "pair_held_out", False)] == 1.0
    assert acc[("seen_pair_lookup", "pair_held_out", True)] < 0.1
    # commutativity recovers about the 70 % of held-out pairs whose mirror was trained
    assert 0.55 < acc[("seen_pair_lookup_commutative", "pair_held_out", True)] < 0.85
    assert 0.2 < acc[("last_assigned_value", "n_vars", 1)] < 0.7
    assert acc[("left_operand_only", "all", "all")] < 0.1
    assert {r["value"] for r in rows if r["stratum"] == "pool"} == set(pools)


@pytest.mark.parametrize("scale", registry.SCALES)
def test_presets_build(scale):
    entry = registry.get("task", "assign_add")
    cfg = entry.make_config(scale)
    tc = TrainConfig(**AssignAddTask.train_presets[scale])
    # the paper's optimiser everywhere; only `small` changes the schedule ([ours], documented)
    assert (tc.weight_decay, tc.betas, tc.grad_clip) == (0.02, (0.9, 0.999), 0.0)
    if scale == "small":
        assert (tc.lr, tc.schedule, tc.decay_rate, tc.decay_steps) == (3e-3, "exp", 0.5, 4000)
    else:
        assert tc.schedule == "constant" and tc.lr == 1e-3
    if scale == "paper":
        assert (tc.steps, tc.batch_size, tc.weight_decay, tc.betas) == (40_000, 512, 0.02,
                                                                        (0.9, 0.999))
        assert cfg == AssignAddConfig()
        return
    task = entry.obj(cfg)
    if scale == "smoke":
        for name in task.splits:
            assert len(task.split(name)) > 0
        rows = task.examples("var2_seen_allowed", 2)
        assert isinstance(rows[0]["label"], int) and rows[0]["text"].endswith("=")
        for kind in task.counterfactual_kinds:
            assert len(task.counterfactuals(kind, 8, "test")) == 8
        assert task.heuristics("val")
    assert len(task.train_batch(0, tc.batch_size)) == tc.batch_size


@pytest.mark.parametrize("key,value", [
    ("p", 1), ("n_vars", 1), ("n_vars", 11), ("seq_len", 7), ("seq_len", 33),
    ("heldout_frac", 1.0), ("heldout_frac", 0.0), ("form_weights", (1.0, -1.0, 1.0, 1.0)),
    ("pool_size", 0), ("seed", -1)])
def test_bad_config_names_the_key(key, value):
    with pytest.raises(UsageError, match=f"task.{key}"):
        AssignAddConfig(**{key: value})


def test_train_batch_is_fast(task):
    task.train_batch(0, 512)
    t0 = time.perf_counter()
    for step in range(50):
        task.train_batch(step, 512)
    assert (time.perf_counter() - t0) / 50 < 0.02  # measured ≈ 3 ms on a 2-core CPU
