"""Runtime-only training settings (device, time budgets, kept states) are no part of a run's
identity: changing them neither renames the run nor makes a re-run "a different config"; they
are still recorded in config.json."""
from __future__ import annotations

import json


from study.cli import main
from study.run.config import resolve
from study.core.settings import runtime_fields
from study.train.config import TrainConfig

BASE = {"task": "counting", "model": "gru", "scale": "smoke"}


def test_runtime_settings_leave_the_hash_alone():
    base = resolve(BASE)
    moved = resolve({**BASE, "train.device": "cpu", "train.max_minutes": "30",
                     "train.resume_minutes": "1", "train.keep_state": "all"})
    assert moved.hash8() == base.hash8() and moved.default_run_dir() == base.default_run_dir()
    assert not set(runtime_fields(TrainConfig)) & set(base.identity()["train"])
    assert moved.to_dict()["train"]["max_minutes"] == 30  # recorded
    # settings that change the weights do change it (precision and compile among them)
    for key, value in (("train.lr", "0.5"), ("train.precision", "bf16"), ("train.compile", "on")):
        assert resolve({**BASE, key: value}).hash8() != base.hash8(), key


def test_rerun_with_other_runtime_settings_is_the_same_run(capsys, tmp_path):
    args = ["run", *(f"{k}={v}" for k, v in BASE.items()), f"run_dir={tmp_path}"]
    assert main(args) == 0
    assert main([*args, "train.device=cpu", "train.max_minutes=5", "train.resume_minutes=1"]) == 0
    assert "already finished" in capsys.readouterr().err
    assert json.loads((tmp_path / "config.json").read_text())["train"]["max_minutes"] == 5
    env = json.loads((tmp_path / "env.json").read_text())["train_runtime"]
    assert env["device"] == "cpu" and env["resume_minutes"] == 1
    assert main([*args, "train.lr=0.5"]) == 2
    assert "different config (train (lr))" in capsys.readouterr().err


def test_describe_counts_every_setting_once_and_the_speed_only_ones_apart(capsys):
    """`describe` alone gives the count of settings; the speed-only group is exactly the
    fields marked runtime=True (TrainConfig's among them), whose help says so."""
    import dataclasses

    from study.core import registry
    assert main(["describe"]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = int(lines[0].split(":")[1])
    parts = [int(line.split()[0]) for line in lines[1:]]
    assert len(parts) == 3 and sum(parts) == total
    configs = [e.config for kind in registry.KINDS for e in registry.entries(kind).values()]
    assert parts[1] == sum(len(runtime_fields(c)) for c in [*configs, TrainConfig])
    assert {"device", "max_minutes", "keep_state"} <= set(runtime_fields(TrainConfig))
    for f in dataclasses.fields(TrainConfig):
        assert ("[runtime" in f.metadata["help"]) == (f.name in runtime_fields(TrainConfig))
