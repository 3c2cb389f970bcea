"""Runtime-only training settings (device, time budgets, kept states) are no part of a run's
identity: changing them neither renames the run nor makes a re-run "a different config"; they
are still recorded in config.json."""
from __future__ import annotations

import json


from study.cli import main
from study.run.config import resolve
from study.core.settings import runtime_fields
from study.train.config import TrainConfig

BASE = {"task": "counting", "model": "gru", "scale": "smoke", "analyses": "none"}


def test_runtime_settings_leave_the_hash_alone():
    base = resolve(BASE)
    moved = resolve({**BASE, "runtime.device": "cpu", "runtime.max_minutes": "30",
                     "runtime.resume_minutes": "1", "runtime.keep_state": "all"})
    assert moved.hash8() == base.hash8() and moved.default_run_dir() == base.default_run_dir()
    assert not set(runtime_fields(TrainConfig)) & set(base.identity()["train"])
    assert moved.to_dict()["train"]["max_minutes"] == 30  # recorded
    # settings that change the weights do change it (precision and compile among them)
    for key, value in (("train.lr", "0.5"), ("train.precision", "bf16"), ("train.compile", "on")):
        assert resolve({**BASE, key: value}).hash8() != base.hash8(), key


def test_a_runtime_key_sets_the_field_of_every_group_that_reads_it_and_old_spellings_still_work():
    """`runtime.NAME` reaches the field wherever it is declared (one name may stand for the
    like fields of several analyses); the old spelling `GROUP.FIELD` gives the same config,
    and one setting given both ways is refused in one line."""
    import pytest

    from study.core.errors import UsageError
    kv = {**BASE, "analyses": "das,probes"}
    new = resolve({**kv, "runtime.device": "cpu", "runtime.eval_batch_size": "7",
                   "runtime.batch_restarts": "false"})
    old = resolve({**kv, "train.device": "cpu", "das.eval_batch_size": "7",
                   "probes.batch_size": "7", "das.batch_restarts": "false"})
    assert new == old and new.train.device == "cpu"
    assert new.analysis_configs["das"].eval_batch_size == new.analysis_configs["probes"].batch_size == 7
    with pytest.raises(UsageError, match="runtime.device and train.device name one setting"):
        resolve({**kv, "runtime.device": "cpu", "train.device": "cpu"})
    with pytest.raises(UsageError, match=r"did you mean runtime.device=\?"):
        resolve({**kv, "runtime.devise": "cpu"})
    with pytest.raises(UsageError, match=r"did you mean runtime.device=\?"):
        resolve({**kv, "train.devise": "cpu"})
    with pytest.raises(UsageError, match=r"runtime.eval_batch_size='many': expected int"):
        resolve({**BASE, "runtime.eval_batch_size": "many"})  # checked with no analysis asked


def test_rerun_with_other_runtime_settings_is_the_same_run(capsys, tmp_path):
    args = ["run", *(f"{k}={v}" for k, v in BASE.items()), f"run_dir={tmp_path}"]
    assert main(args) == 0
    assert main([*args, "runtime.device=cpu", "runtime.max_minutes=5", "runtime.resume_minutes=1"]) == 0
    assert "already finished" in capsys.readouterr().err
    assert json.loads((tmp_path / "config.json").read_text())["train"]["max_minutes"] == 5
    env = json.loads((tmp_path / "env.json").read_text())["train_runtime"]
    assert env["device"] == "cpu" and env["resume_minutes"] == 1
    assert main([*args, "train.lr=0.5"]) == 2
    assert "different config (train (lr))" in capsys.readouterr().err


def test_describe_counts_the_settings_of_a_run_and_the_runtime_group_apart(capsys):
    """`describe` alone: the settings one run takes (run keys, its task's, its family's,
    training's and those of every analysis the family can run), every key of what a run
    computes once by group, and the runtime group apart: exactly the names of the fields
    marked runtime=True, whose help says so. Values the code holds fixed are not counted."""
    import dataclasses

    from study.core import registry
    from study.core.settings import describe_fields, fixed_fields
    from study.run.config import TOP_KEYS
    from study.run.runtime_keys import runtime_keys
    assert main(["describe"]) == 0
    lines = capsys.readouterr().out.splitlines()

    def settings(cls):
        return [f for f in describe_fields(cls) if not f.runtime]
    gru = registry.get("model", "gru")
    able = [e for e in registry.entries("analysis").values() if e.requires <= gru.capabilities]
    run = (len(TOP_KEYS) + len(settings(registry.get("task", "counting").config))
           + len(settings(gru.config)) + len(settings(TrainConfig))
           + sum(len(settings(e.config)) for e in able))
    assert f"counting x gru {run}" in lines[0]
    assert "cell" in fixed_fields(gru.config) and "cell" not in {f.name for f in settings(gru.config)}
    total = int(lines[1].split(":")[1])
    groups = [int(line.split()[0]) for line in lines[2:] if line.startswith("  ")]
    assert sum(groups) == total
    speed = next(line for line in lines if line.startswith("how a run executes"))
    assert int(speed.split(":")[1].split()[0]) == len(runtime_keys())
    assert {"device", "max_minutes", "keep_state", "eval_batch_size"} <= set(runtime_keys())
    for f in dataclasses.fields(TrainConfig):
        assert ("[runtime" in f.metadata["help"]) == (f.name in runtime_fields(TrainConfig))
