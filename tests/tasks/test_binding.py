"""Task `binding`: programs are valid Python whose exec gives the label; depth law, splits,
determinism, counterfactual pairs, heuristics and config validation."""
from __future__ import annotations

import re

import numpy as np
import pytest

from study.core.errors import UsageError
from study.core.registry import SCALES, get
from study.train.config import TrainConfig
from study.tasks.base import IGNORE
from study.tasks.binding import BindingConfig, BindingTask
from study.tasks.binding.generate import bucket as split_bucket
from study.tasks.binding.pairs import ONE_TOKEN
from study.tasks.binding.vocab import LETTERS

SMOKE = get("task", "binding").presets["smoke"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STUDY_CACHE", str(tmp_path_factory.mktemp("study_cache")))
        yield


@pytest.fixture(scope="module")
def task(cache):
    return BindingTask(get("task", "binding").make_config("smoke"))


def run(text: str) -> tuple[int, int, int, bool]:
    """exec the assignment lines; also follow the query's chain by hand -> (value, depth,
    line of the chain's digit, stale), with sequential semantics (latest assignment wins).
    `stale`: a letter the chain read was later reassigned to another value, so its final
    value is not the one the chain used."""
    body, query = text.rsplit("\n", 1)
    assert re.fullmatch(r"#[a-z]:", query)
    namespace: dict = {}
    exec(body, {"__builtins__": {}}, namespace)
    depth, root, value, read = {}, {}, {}, {}  # per letter: binding in force / as last read
    for k, line in enumerate(body.split("\n")):
        lhs, rhs = line.split("=")
        if rhs.isdigit():
            depth[lhs], root[lhs], value[lhs], read[lhs] = 1, k, int(rhs), []
        else:
            read[lhs] = read[rhs] + [(rhs, value[rhs])]
            depth[lhs], root[lhs], value[lhs] = depth[rhs] + 1, root[rhs], value[rhs]
    q = query[1]
    stale = any(namespace[x] != v for x, v in read[q])
    return namespace[q], depth[q], root[q], stale


def reassigns(text: str) -> bool:
    lhs = [line[0] for line in text.split("\n")[:-1]]
    return len(set(lhs)) < len(lhs)


def check_format(task, ids, labels, n_lines=None):
    text = task.render(ids)
    lines = text.split("\n")
    assigned = set()
    for line in lines[:-1]:
        assert re.fullmatch(r"[a-z]=[a-z0-9]", line), line
        assert line[2].isdigit() or line[2] in assigned, "reference to an unassigned letter"
        assigned.add(line[0])
    assert lines[-1][1] in assigned
    if n_lines is not None:
        assert len(lines) - 1 == n_lines
    length = 4 * (len(lines) - 1) + 3
    assert (ids[length:] == task.pad_id).all() and (ids[:length] != task.pad_id).all()
    assert task.encode(text) == ids[:length].tolist()  # render is exactly the token string
    scored = np.flatnonzero(labels != IGNORE)
    assert scored.tolist() == [length - 1] and task.vocab[ids[length - 1]] == ":"
    return text


def check_programs(task, split: str, ex) -> tuple[int, int]:
    """Every program of a split is well formed, its label is exec's answer and its strata
    follow the chain -> (programs that reassign a letter, programs with a stale chain)."""
    fixed = task.config.n_lines if split != "gen_lines" else None
    n_reassigned = n_stale = 0
    for i in range(len(ex)):
        text = check_format(task, ex.ids[i], ex.labels[i], fixed)
        value, depth, root, stale = run(text)
        assert task.label_of(ex.labels[i]) == value, (split, text)
        assert ex.strata["depth"][i] == depth and ex.strata["root_line"][i] == root
        first = int(text.split("\n")[0][2])
        assert ex.strata["answer_is_first_line_constant"][i] == (value == first)
        n_reassigned += reassigns(text)
        n_stale += stale
    return n_reassigned, n_stale


def test_every_program_is_valid_python_and_its_label_is_execs_answer(task):
    for split in task.splits:
        ex = task.split(split)
        width = 4 * (25 if split == "gen_lines" else 16) + 3  # the split's longest program
        assert ex.ids.shape == ex.labels.shape == (len(ex), width)
        assert ex.ids.dtype == np.uint8 and ex.labels.dtype == np.int8  # 500k programs: 34 MB
        n_reassigned, n_stale = check_programs(task, split, ex)
        # reassignment is common, and some chains read a letter whose final value differs
        assert 0.2 < n_reassigned / len(ex) < 0.5, (split, n_reassigned)
        if len(ex) >= 500:
            assert n_stale >= 0.02 * len(ex), (split, n_stale)


def test_no_reassignment_when_disabled(cache):
    task = BindingTask(BindingConfig(**{**SMOKE, "p_reassign": 0.0}))
    assert not any(reassigns(task.render(row)) for row in task.split("test").ids)


def test_depth_follows_cubic_weights(cache):
    task = BindingTask(BindingConfig(n_train=20_000, n_val=100, n_test=100))
    depth = np.concatenate([task.split(s).strata["depth"] for s in ("train", "val", "test")])
    observed = np.bincount(depth, minlength=5)[1:]
    expected = len(depth) * np.array([1, 8, 27, 64]) / 100
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 16.27, (observed, expected)  # 3 d.o.f., p = 0.001


def test_generalisation_sets_cover_their_ranges(task):
    c = task.config
    lines = task.split("gen_lines").strata["n_lines"]
    assert (np.bincount(lines)[2:26] == c.n_gen_per_value).all() and lines.min() == 2
    hops = task.split("gen_hops").strata["depth"]
    assert (np.bincount(hops)[1:14] == c.n_gen_per_value).all() and hops.max() == 13
    assert task.seq_len == 4 * 25 + 3 == 103  # the widest split, gen_lines


def test_splits_are_unique_and_disjoint(task):
    seen = {}
    for split in task.splits:
        rows = {r[r != task.pad_id].tobytes() for r in task.split(split).ids}  # any width
        assert len(rows) == len(task.split(split)), f"{split} repeats a program"
        for other, other_rows in seen.items():
            assert not rows & other_rows, f"{split} and {other} share programs"
        seen[split] = rows
    c = task.config
    assert [len(task.split(s)) for s in ("train", "val", "test", "gen_heldout_combos")] == \
        [c.n_train, c.n_val, c.n_test, c.n_gen_heldout]


def test_row_hash_is_fnv1a_and_the_finaliser_modulo_2_64():
    """The split-assigning bucket, against the hash written with Python's unbounded ints: the
    32-bit-halves arithmetic must give exactly the 64-bit hash the splits were cut by."""
    def bucket(row):
        h, m = 0xCBF29CE484222325, 2 ** 64
        for t in row:
            if t:  # PAD is skipped
                h = (h ^ t) * 0x100000001B3 % m
        h ^= h >> 33
        h = h * 0xFF51AFD7ED558CCD % m
        return (h ^ h >> 33) % 32
    rng = np.random.default_rng(0)
    toks = rng.integers(0, 41, (2000, 67)).astype(np.uint8)
    toks[:1000, 40:] = 0  # padded rows too
    got = split_bucket(toks)
    assert got.dtype == np.int64 and got.tolist() == [bucket(r) for r in toks.tolist()]


def test_heldout_combinations_appear_only_in_their_split(task):
    table = task.heldout
    assert table.sum() == 26 and (table.sum(1) == 1).all()  # 10 % of 260, one per letter
    for split in task.splits:
        ex = task.split(split)
        q = ex.ids[np.arange(len(ex)), (ex.labels != IGNORE).argmax(1) - 1] - 1
        held = table[q, [task.label_of(l) for l in ex.labels]]
        assert held.all() if split == "gen_heldout_combos" else not held.any(), split


@pytest.mark.parametrize("n_letters", [4, 6, 9, 14])
def test_fewer_letters_use_only_the_first_ones_and_hold_out_their_share(cache, n_letters):
    lines = min(n_letters, 6)
    task = BindingTask(BindingConfig(**{**SMOKE, "n_letters": n_letters, "n_lines": lines,
                                        "max_depth": 3, "gen_max_lines": n_letters,
                                        "gen_max_hops": lines, "n_train": 300}))
    table = task.heldout
    assert table.sum() == round(0.1 * 10 * n_letters) and not table[n_letters:].any()
    assert table.sum(1).max() - table[:n_letters].sum(1).min() <= 1  # spread over letters
    for split in ("train", "test", "gen_lines", "gen_heldout_combos"):
        ex = task.split(split)
        text = "".join(task.render(row) for row in ex.ids)
        assert set(c for c in text if c.isalpha()) <= set("abcdefghijklmnopqrstuvwxyz"[:n_letters])
        check_programs(task, split, ex)  # still valid Python, labelled by exec
    with pytest.raises(UsageError, match=r"task.n_lines=7 must be in 2..task.n_letters \(6\)"):
        BindingConfig(n_letters=6, n_lines=7, gen_max_lines=6)


def test_generation_is_a_pure_function_of_the_config(cache):
    cfg = BindingConfig(**SMOKE)
    a, b = BindingTask(cfg), BindingTask(cfg)
    for split in a.splits:
        x, y = a.generate(split), b.generate(split)
        assert np.array_equal(x.ids, y.ids) and np.array_equal(x.labels, y.labels)
        assert all(np.array_equal(x.strata[k], y.strata[k]) for k in x.strata)
    other = BindingTask(BindingConfig(**{**SMOKE, "seed": 1}))
    assert not np.array_equal(a.generate("test").ids, other.generate("test").ids)


@pytest.mark.parametrize("kind", ONE_TOKEN)
def test_counterfactual_pairs_are_valid_and_labelled_by_exec(task, kind):
    pairs = task.counterfactuals(kind, 300, "test", seed=3)
    assert len(pairs) == 300 and (pairs.base_pos == -1).all() and (pairs.source_pos == -1).all()
    n_reassigned = 0
    for i in range(len(pairs)):
        b = check_format(task, pairs.base_ids[i], pairs.base_labels[i], 16)
        s = check_format(task, pairs.source_ids[i], pairs.cf_labels[i], 16)
        assert (pairs.base_ids[i] != pairs.source_ids[i]).sum() == 1  # aligned, one token
        base, source = run(b)[0], run(s)[0]
        n_reassigned += reassigns(b)
        assert task.label_of(pairs.base_labels[i]) == base
        if kind == "distractor":
            assert source == base == task.label_of(pairs.cf_labels[i])
        else:
            assert source != base and task.label_of(pairs.cf_labels[i]) == source
        if kind == "root_value":
            assert b.split("\n")[run(b)[2]][2] != s.split("\n")[run(b)[2]][2]
        if kind == "referent":  # the query's line names another letter; the query stays
            line = query_line(b)
            assert b.split("\n")[-1] == s.split("\n")[-1]
            assert b.split("\n")[line][2].isalpha() and run(b)[1] >= 2
            assert s.split("\n")[line][2] != b.split("\n")[line][2]
            assert s.split("\n")[line][2] == LETTERS[pairs.strata["value"][i]]
    assert n_reassigned > 30  # pairs are built on programs with reassignments too
    again = task.counterfactuals(kind, 300, "test", seed=3)
    assert np.array_equal(again.base_ids, pairs.base_ids)
    assert np.array_equal(again.source_ids, pairs.source_ids)
    other = task.counterfactuals(kind, 300, "test", seed=4)
    assert not np.array_equal(other.source_ids, pairs.source_ids)
    assert "root_value" in task.causal_variables


def query_line(text: str) -> int:
    """The last line assigning the queried letter."""
    lines = text.split("\n")
    return max(k for k, line in enumerate(lines[:-1]) if line[0] == lines[-1][1])


def with_letter(text: str, variable: str, letter: str) -> str:
    """The program with `variable` alone set to `letter`: the query letter, or the letter
    the query's line copies."""
    lines = text.split("\n")
    if variable == "query":
        lines[-1] = f"#{letter}:"
    else:
        k = query_line(text)
        lines[k] = lines[k][:2] + letter
    return "\n".join(lines)


@pytest.mark.parametrize("variable", ["query", "referent"])
def test_renamed_letters_keep_the_program_and_label_the_letters_identity(task, variable):
    """The source is the base with its letters consistently renamed: the same answer, chain
    depth and digit line; the label is what exec gives for the base with the variable alone
    set to the renamed letter, another answer than the base's."""
    pairs = task.counterfactuals(f"renamed:{variable}", 200, "test", seed=3)
    assert len(pairs) == 200
    for i in range(len(pairs)):
        b = check_format(task, pairs.base_ids[i], pairs.base_labels[i], 16)
        s = task.render(pairs.source_ids[i])
        check_format(task, pairs.source_ids[i], pairs.base_labels[i], 16)  # the same answer
        rename = {}
        for x, y in zip(b, s):
            assert x.isalpha() == y.isalpha() and (x.isalpha() or x == y)
            if x.isalpha():
                assert rename.setdefault(x, y) == y  # consistently
        assert len(set(rename.values())) == len(rename)  # one to one
        assert run(s)[:3] == run(b)[:3]  # answer, depth, digit line: the same structure
        x = b.split("\n")[-1][1] if variable == "query" else b.split("\n")[query_line(b)][2]
        assert rename[x] != x and LETTERS[pairs.strata["value"][i]] == rename[x]
        identity = run(with_letter(b, variable, rename[x]))[0]
        assert task.label_of(pairs.cf_labels[i]) == identity != run(b)[0]
    assert (pairs.changed).all()


@pytest.mark.parametrize("kind", BindingTask.counterfactual_kinds)
def test_value_labels_are_the_causal_models_answer_for_each_value(task, kind):
    """`value_labels` with the pairs' own values gives their counterfactual labels; with
    another value, what exec gives for that value (the shuffled control's oracle)."""
    pairs = task.counterfactuals(kind, 100, "test", seed=5)
    assert np.array_equal(task.value_labels(pairs, pairs.strata["value"]), pairs.cf_labels) \
        or kind == "distractor"
    other = np.roll(pairs.strata["value"], 1)
    got = task.value_labels(pairs, other)
    variable = kind.partition(":")[2] or kind
    for i in range(len(pairs)):
        b = task.render(pairs.base_ids[i])
        if variable in ("query", "referent"):
            text = with_letter(b, variable, LETTERS[other[i]])
            try:
                want = run(text)[0]
            except (KeyError, NameError):  # a letter bound to nothing: no answer
                want = None
        elif kind == "resolved":  # the base with line `line` assigning the other digit
            lines = b.split("\n")
            k = pairs.strata["line"][i]
            lines[k] = lines[k][:2] + str(other[i])
            want = run("\n".join(lines))[0]
        else:
            want = other[i] if kind == "root_value" else run(b)[0]
        label = got[i][got[i] != IGNORE]
        assert (label.tolist() == [] if want is None else
                task.label_of(got[i]) == want), (kind, b, other[i])


def test_heuristics_stay_near_the_papers_plateau(task):
    rows = task.heuristics("test")
    overall = {r["heuristic"]: r["accuracy"] for r in rows if r["stratum"] == "all"}
    assert set(overall) == {"first_line_constant", "last_constant", "most_frequent_digit",
                            "nearest_constant"}
    assert all(0 <= r["accuracy"] <= 1 and r["n"] > 0 for r in rows)
    assert max(overall.values()) <= 0.65
    ex = task.split("test")
    assert overall["first_line_constant"] == pytest.approx(
        ex.strata["answer_is_first_line_constant"].mean())
    by_depth = {(r["heuristic"], r["value"]): r["accuracy"]
                for r in rows if r["stratum"] == "depth"}
    assert by_depth[("nearest_constant", 1)] == 1.0  # a depth-1 query's own line is its digit
    # the first-line rule works for long chains and fails for short ones [paper, phase 2]
    assert by_depth[("first_line_constant", 4)] > by_depth[("first_line_constant", 2)]


@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_builds(cache, scale):
    entry = get("task", "binding")
    assert entry.obj is BindingTask
    sizes = {k: v for k, v in SMOKE.items()}
    task = BindingTask(entry.make_config(scale, sizes))
    for split in task.splits:
        assert len(task.split(split)) > 0
    TrainConfig(**BindingTask.train_presets[scale])
    assert task.examples("val", 2)[0]["text"].endswith(":")


def test_paper_training_setup():
    t = TrainConfig(**BindingTask.train_presets["paper"])
    assert (t.steps, t.batch_size, t.lr, t.weight_decay, t.betas, t.warmup_steps, t.schedule) \
        == (105_400, 64, 1e-4, 1e-4, (0.95, 0.999), 750, "linear")
    c = BindingConfig()
    assert (c.n_lines, c.max_depth, c.n_train, c.n_val, c.n_test) == (16, 4, 450_000, 1_000, 49_000)


@pytest.mark.parametrize("key,value", [
    ("n_lines", 1), ("n_lines", 27), ("max_depth", 0), ("max_depth", 17), ("n_train", 0),
    ("shortcut_accept", 0.0), ("shortcut_accept", 1.5), ("p_reassign", 1.5), ("heldout_fraction", 0.9),
    ("gen_max_lines", 30), ("gen_max_hops", 20), ("depth_exponent", -1.0), ("seed", -1)])
def test_bad_config_names_the_key(key, value):
    with pytest.raises(UsageError, match=f"task.{key}="):
        BindingConfig(**{key: value})


def test_bad_counterfactual_kind_and_split(task):
    with pytest.raises(UsageError, match="root_value"):
        task.counterfactuals("nonsense", 10)
    with pytest.raises(UsageError, match="gen_hops"):
        task.split("nonsense")
