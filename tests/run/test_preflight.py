"""Commands this machine cannot run are refused at parse time, in one line, with nothing
written: a device it lacks, training that cannot fit in its memory."""
from __future__ import annotations

import pytest
import torch

from study.cli import main
from study.core.memory import GIB, host_memory, training_bytes
from study.core.registry import get

BASE = ["run", "task=counting", "model=gru", "scale=smoke", "analyses=none"]


def _refused(capsys, tmp_path, *args) -> str:
    rc = main([*BASE, f"run_dir={tmp_path / 'run'}", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()  # nothing written
    return err


def test_batch_far_beyond_memory_is_refused_naming_the_setting(capsys, tmp_path):
    err = _refused(capsys, tmp_path, "train.batch_size=1e9")
    assert "train.batch_size=1000000000" in err and "GiB" in err and "lower train.batch_size" in err


def test_widths_whose_parameters_cannot_fit_are_refused(capsys, tmp_path):
    err = _refused(capsys, tmp_path, "model.d_hidden=65536", "model.d_embed=65536")
    assert "parameters" in err and "model.* widths" in err
    # each width has its own cap too
    assert "1..65536" in _refused(capsys, tmp_path, "model.d_hidden=70000")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_cuda_is_refused_before_the_run_dir_exists_and_the_fix_then_runs(capsys, tmp_path):
    err = _refused(capsys, tmp_path, "runtime.device=cuda")
    assert "runtime.device='cuda'" in err and "no CUDA device" in err
    # the corrected command is not taken for "a different config": nothing was written
    assert main([*BASE, f"run_dir={tmp_path / 'run'}", "runtime.device=cpu"]) == 0


def test_a_device_that_is_no_device_is_refused(capsys, tmp_path):
    assert "is not a device" in _refused(capsys, tmp_path, "runtime.device=tpu")


def test_estimate_grows_with_batch_and_width():
    gru = get("model", "gru")
    small = training_bytes(gru.make_config("smoke"), 16, 43, 9)
    assert sum(small) < GIB  # smoke runs never need a look-up
    wide = training_bytes(gru.make_config("smoke", {"d_hidden": "4096"}), 16, 43, 9)
    big_batch = training_bytes(gru.make_config("smoke"), 16_000, 43, 9)
    assert wide[0] > small[0] and big_batch[1] == pytest.approx(1000 * small[1])
    assert host_memory() > GIB


@pytest.mark.parametrize("task, size", [("binding", "task.n_train=1000000000000"),
                                        ("counting", "task.max_count=1000000000"),
                                        ("assign_add", "task.n_train=100000000000")])
def test_data_far_beyond_memory_is_refused_before_the_task_is_built(capsys, tmp_path, task,
                                                                     size):
    import time
    start = time.perf_counter()
    rc = main(["run", f"task={task}", "model=gru", "scale=smoke", f"run_dir={tmp_path / 'run'}",
               size])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
    assert time.perf_counter() - start < 10  # estimated, not generated
    key, value = size.split("=")
    assert f"task={task}'s data needs about" in err and f"{key}={int(value):,}" in err
    rc = main(["sample", f"task={task}", size])
    assert rc == 2 and f"{key}={int(value):,}" in capsys.readouterr().err


def test_an_edited_config_with_huge_data_is_refused_by_analyze(trained_runs, tmp_path, capsys):
    import json
    import shutil
    run = tmp_path / "run"
    shutil.copytree(trained_runs("gru"), run)
    capsys.readouterr()
    config = json.loads((run / "config.json").read_text())
    config["task_config"]["max_count"] = 1_000_000_000
    (run / "config.json").write_text(json.dumps(config))
    rc = main(["analyze", str(run), "analysis=das"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "task.max_count=1,000,000,000" in err


def test_every_scale_of_every_task_fits_a_laptop():
    """The data estimate refuses nothing a preset asks for on an 8 GiB machine."""
    from study.core.registry import SCALES, entries
    ours = {n: e for n, e in entries("task").items()
            if e.obj.__module__.startswith("study.")}  # not the toy tasks other tests register
    assert {"binding", "counting", "assign_add"} <= set(ours)
    for name, entry in ours.items():
        for scale in SCALES:
            assert entry.make_config(scale).data_bytes() < 8 * GIB, (name, scale)
