"""Task `binding`: the `resolved` variable's pairs (the value a line resolves to, intervened at
that line) are labelled by exec, and the answer does not determine the variable on them;
every pair kind's sources stay inside the trained depth and record their depth and their own
labels."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from study.core.registry import get
from study.tasks.base import IGNORE
from study.tasks.binding import BindingTask
from study.tasks.binding.causal import interpret
from study.tasks.binding.pairs import referent_options
from tests.tasks.test_binding import cache, check_format, run, task  # noqa: F401  (fixtures)


def line_values(text: str) -> list[int]:
    """exec the first k lines for each k: the value line k's letter holds right after it."""
    lines = text.split("\n")[:-1]
    out = []
    for k, line in enumerate(lines):
        namespace: dict = {}
        exec("\n".join(lines[:k + 1]), {"__builtins__": {}}, namespace)
        out.append(namespace[line[0]])
    return out


def with_line(text: str, k: int, digit: int) -> str:
    """The program with line k assigning `digit`: its letter bound to that value there."""
    lines = text.split("\n")
    lines[k] = lines[k][:2] + str(digit)
    return "\n".join(lines)


def test_resolved_pairs_intervene_at_the_line_and_are_labelled_by_exec(task):  # noqa: F811
    pairs = task.counterfactuals("resolved", 300, "test", seed=3)
    assert len(pairs) == 300
    line = pairs.strata["line"]
    assert np.array_equal(pairs.base_pos, 4 * line + 2)  # line i's right-hand token
    assert np.array_equal(pairs.source_pos, pairs.base_pos)
    for i in range(len(pairs)):
        b = check_format(task, pairs.base_ids[i], pairs.base_labels[i], 16)
        s = task.render(pairs.source_ids[i])
        k = int(line[i])
        diff = np.flatnonzero(pairs.base_ids[i] != pairs.source_ids[i])
        # one earlier digit differs; the token at the site is the base's, a letter
        assert len(diff) == 1 and diff[0] < pairs.base_pos[i] and diff[0] % 4 == 2
        assert b[diff[0]].isdigit() and b[4 * k + 2] == s[4 * k + 2] and b[4 * k + 2].isalpha()
        base_values, source_values = line_values(b), line_values(s)
        assert source_values[k] == pairs.strata["value"][i] != base_values[k]
        # the oracle: the base run with line k's letter bound to the source's value
        cf = run(with_line(b, k, source_values[k]))[0]
        assert task.label_of(pairs.cf_labels[i]) == cf
        base = run(b)[0]
        assert pairs.changed[i] == (cf != base) == bool(pairs.strata["on_chain"][i])
        assert pairs.strata["source_depth"][i] == run(s)[1] == run(b)[1]
    # half the pairs run the query's chain through the line; the other half keep the answer
    assert pairs.changed.mean() == pytest.approx(0.5)
    again = task.counterfactuals("resolved", 300, "test", seed=3)
    assert np.array_equal(again.source_ids, pairs.source_ids)


def several(keys, values) -> int:
    """How many keys map to more than one value."""
    seen = defaultdict(set)
    for k, v in zip(keys, values):
        seen[k].add(int(v))
    return sum(len(s) > 1 for s in seen.values())


def test_resolved_value_is_not_a_function_of_the_answer_nor_of_the_site_token(task):  # noqa: F811
    """On 1,000 pairs the counterfactual resolved value (the source's value at line i) takes
    several values for one counterfactual answer, one source answer, one token at the site
    and one (answer, token) together: neither an answer code nor an input code can stand in
    for it."""
    pairs = task.counterfactuals("resolved", 1000, "test", seed=0)
    value = pairs.strata["value"]
    rows = np.arange(len(pairs))
    cf_answer = [task.label_of(c) for c in pairs.cf_labels]
    src_answer = [run(task.render(s))[0] for s in pairs.source_ids]
    token = pairs.source_ids[rows, pairs.source_pos]  # the right-hand letter of line i
    before = pairs.source_ids[rows, pairs.source_pos - 1]  # `=`: the window adds nothing
    assert several(cf_answer, value) >= 5 and several(src_answer, value) >= 5
    assert several(token.tolist(), value) >= 5
    assert several(list(zip(token.tolist(), before.tolist())), value) >= 5
    assert several(list(zip(cf_answer, token.tolist())), value) >= 5


@pytest.fixture(scope="module")
def shallow(cache):  # noqa: F811
    """A network trained on chains of at most 2 hops: the laptop variant's depth."""
    return BindingTask(get("task", "binding").make_config("smoke", {"max_depth": 2}))


@pytest.mark.parametrize("kind", BindingTask.counterfactual_kinds)
def test_every_pair_records_its_source_depth_inside_the_trained_depth(shallow, kind):
    pairs = shallow.counterfactuals(kind, 300, "test", seed=1)
    depth = pairs.strata["source_depth"]
    assert len(depth) == len(pairs) and depth.max() <= shallow.config.max_depth == 2
    for i in range(0, len(pairs), 10):
        answer, hops = run(shallow.render(pairs.source_ids[i]))[:2]
        assert hops == depth[i]
        # the source's own labels: its answer at its `:`, what the network must say there
        assert shallow.label_of(pairs.source_labels[i]) == answer
        assert (pairs.source_labels[i] != IGNORE).sum() == 1
    if kind == "referent":  # a letter of depth 2 copied on the query's line: 3 hops
        ids = shallow.split("test").ids
        p, letters, free = interpret(ids), shallow.config.n_letters, ~shallow.heldout
        every = referent_options(ids, p, letters, free)[0]
        inside = referent_options(ids, p, letters, free, np.full(len(ids), 2))[0]
        assert (every & ~inside).sum() > 0.05 * every.sum()  # what the limit leaves out
