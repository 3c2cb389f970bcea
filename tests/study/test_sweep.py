"""Sweeps expand comma lists into runs; tuple-valued fields and analyses keep their commas."""
import pytest

from study.errors import UsageError
from study.sweep import STUDIES, expand
from study.config import resolve


def test_expands_cartesian_product():
    combos = expand({"task": "counting", "model": "gru,lstm", "seed": "0,1,2", "scale": "smoke"})
    assert len(combos) == 6
    assert {(c["model"], c["seed"]) for c in combos} == {(m, s) for m in ("gru", "lstm") for s in "012"}


def test_tuple_fields_and_analyses_are_not_expanded():
    combos = expand({"task": "counting", "model": "gru", "train.betas": "0.9,0.99",
                     "analyses": "patching,das"})
    assert len(combos) == 1
    assert resolve(combos[0]).train.betas == (0.9, 0.99)


def test_distinct_runs_get_distinct_directories():
    combos = expand({"task": "counting", "model": "gru,lstm", "seed": "0,1", "scale": "smoke"})
    paths = {resolve(c).path for c in combos}
    assert len(paths) == 4


def test_run_dir_cannot_be_swept():
    with pytest.raises(UsageError):
        expand({"task": "counting", "model": "gru", "run_dir": "x"})


def test_predefined_studies_resolve():
    for name, kv in STUDIES.items():
        for combo in expand(dict(kv)):
            resolve(combo)
