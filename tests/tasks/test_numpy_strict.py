"""Every task's data under numpy at its strictest: every split of every registered task at
scale=smoke is generated with floating-point errors raised, warnings made errors, and a
Python integer that does not fit beside an integer array in `np.where` / `np.select` /
`np.choose` made an OverflowError. numpy 2.5 raises so in `np.where`; 2.4 wraps silently
(`np.where(c, uint8_ids - 27, -1)` holds 255), so without this a task could rely on the wrap
and pass here. Labels are checked against each task's oracle (the task's own test file);
the views that read ids give on compact unsigned ids what they give on int64 ones."""
from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np
import pytest

from study.core import registry
from study.tasks.base import IGNORE
from tests.tasks.test_assign_add import check_examples as check_assign_add
from tests.tasks.test_binding import check_programs as check_binding
from tests.tasks.test_counting import check_labels_by_program

# the project's tasks (not those other test files register for themselves)
TASKS = list(registry.builtin("task"))


def _fits(func):
    """`func` raising OverflowError when a Python int among its value arguments (all but the
    first: the condition or index array) is out of range of the integer dtype the array
    arguments promote to, where numpy 2.4 converts it with wrap-around."""
    @functools.wraps(func)
    def strict(*args, **kwargs):
        values = []
        for v in (*args[1:], *kwargs.values()):
            values.extend(v if isinstance(v, (list, tuple)) else [v])
        arrays = [v for v in values if isinstance(v, (np.ndarray, np.generic))]
        if arrays and np.result_type(*arrays).kind in "ui":
            dtype = np.result_type(*arrays)
            info = np.iinfo(dtype)
            for v in values:
                if type(v) is int and not info.min <= v <= info.max:
                    raise OverflowError(f"Python integer {v} out of bounds for {dtype} "
                                        f"in np.{func.__name__}")
        return func(*args, **kwargs)
    return strict


@contextlib.contextmanager
def strict_numpy():
    """numpy at its strictest for the duration (see the module docstring)."""
    saved = {name: getattr(np, name) for name in ("where", "select", "choose")}
    try:
        for name, func in saved.items():
            setattr(np, name, _fits(func))
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            yield
    finally:
        for name, func in saved.items():
            setattr(np, name, func)


def make(name: str):
    entry = registry.get("task", name)
    return entry.obj(entry.make_config("smoke"))


def test_the_strict_mode_catches_what_numpy_2_4_lets_through():
    ids, where = np.array([0, 30], np.uint8), np.where
    with strict_numpy():
        with pytest.raises(OverflowError, match="-1 out of bounds for uint8"):
            np.where(ids > 0, ids - 27, -1)
        with pytest.raises(OverflowError, match="300 out of bounds for uint8"):
            np.select([ids > 0], [ids], 300)
        with pytest.raises(FloatingPointError):
            np.float64(1.0) / 0.0
        assert np.where(ids > 0, ids.astype(np.int64) - 27, -1).tolist() == [-1, 3]
    assert np.where is where  # numpy is itself again


def check_labels(name, task, split, ex) -> None:
    """Labels signed, IGNORE or a token id; then the task's own oracle where it has one."""
    assert ex.labels.dtype.kind == "i" and len(ex.labels) == len(ex.ids) > 0
    assert ((ex.labels == IGNORE) | ((ex.labels >= 0) & (ex.labels < len(task.vocab)))).all()
    assert (ex.labels != IGNORE).any(1).all(), "every example scores something"
    if name == "binding":  # exec of the assignment lines
        check_binding(task, split, ex)
    elif name == "assign_add":  # a re-parse of the rendered tokens
        check_assign_add(task, ex)
    elif name == "counting":  # the task's Up-Down program
        for row, lab, n in zip(ex.ids, ex.labels, ex.strata["count"]):
            check_labels_by_program(task, row, lab, n)


@pytest.mark.parametrize("name", TASKS)
def test_every_split_is_made_and_labelled_right_under_strict_numpy(name):
    task = make(name)
    for split in task.splits:
        with strict_numpy():
            ex = task.generate(split)  # not the disk cache: the generator itself must run
        check_labels(name, task, split, ex)
        task._cache[split] = ex
    with strict_numpy():
        task.heuristics("test")
        for kind in task.counterfactual_kinds:
            assert len(task.counterfactuals(kind, 20, "test")) == 20


@pytest.mark.parametrize("name", TASKS)
def test_views_read_compact_unsigned_ids_as_they_read_int64_ones(name):
    task = make(name)
    ex = task.split("test").take(slice(0, 64))
    wide = np.asarray(ex.ids, np.int64)
    narrow = wide.astype(np.min_scalar_type(len(task.vocab) - 1))  # uint8 for every task
    assert narrow.dtype.kind == "u"
    with strict_numpy():
        for view in (lambda ids: task.probe_variables(ids, ex.labels),
                     task.attention_targets, task.operands):
            want, got = view(wide), view(narrow)
            np.testing.assert_equal(got, want)
