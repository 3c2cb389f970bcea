"""A damaged newest training state: the run sets it aside and resumes from the previous one,
which checkpoints keep for this, ending bit-identical to a run never interrupted."""
from __future__ import annotations

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from study.run.config import train_config
from study.core.registry import get
from study.core.rundir import RunDir
from study.train import checkpoint as ckpt
from study.train.loop import train
from study.train.schedule import checkpoint_steps

TASK, MODEL = get("task", "counting"), get("model", "gru")
STEPS = 60


def _run(path, callback=None, keep_state="last"):
    cfg = train_config(TASK, "smoke", {"steps": STEPS, "checkpoints": 5, "resume_minutes": 0,
                                       "log_every": 7, "keep_state": keep_state})
    task = TASK.obj(TASK.make_config("smoke"))
    return train(RunDir(path), task, MODEL, MODEL.make_config("smoke"), cfg, 0, callback=callback)


def _interrupt_at(k):
    def cb(step):
        if step == k:
            raise KeyboardInterrupt
    return cb


def _final_weights(path):
    return load_file(str(ckpt.checkpoints_dir(path) / ckpt.dir_name(STEPS) / ckpt.WEIGHTS))


def _assert_same_run(a, b):
    wa, wb = _final_weights(a), _final_weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    pd.testing.assert_frame_equal(pd.read_parquet(a / "metrics.parquet"),
                                  pd.read_parquet(b / "metrics.parquet"), check_exact=True)
    assert ckpt.list_checkpoints(a) == ckpt.list_checkpoints(b)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    path = tmp_path_factory.mktemp("uninterrupted")
    _run(path)
    return path


def _truncate(path):
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 3])


# interrupted between checkpoints (a resume point is newest) or exactly at one (a logged
# checkpoint is newest); its state or its weights damaged
@pytest.mark.parametrize("stop", [31, 22])
@pytest.mark.parametrize("damaged", [ckpt.STATE, ckpt.WEIGHTS])
def test_damaged_newest_state_falls_back_to_the_previous(tmp_path, uninterrupted, capfd, stop, damaged):
    assert 22 in checkpoint_steps(STEPS, 5) and 31 not in checkpoint_steps(STEPS, 5)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, callback=_interrupt_at(stop))
    states = ckpt.state_dirs(tmp_path)
    assert len(states) == 2 and states[-1][0] == stop  # the newest and the one before it
    previous, newest = states[0][1], states[-1][1]
    _truncate(newest / damaged)

    summary = _run(tmp_path)
    err = capfd.readouterr().err
    notices = [line for line in err.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1, err
    assert str(newest / damaged) in notices[0] and f"step {states[0][0]} ({previous.name})" in notices[0]
    assert summary["steps_done"] == STEPS
    _assert_same_run(uninterrupted, tmp_path)
    # the damaged file is kept for inspection (a re-written logged checkpoint keeps it too)
    assert (newest / f"{damaged}.damaged").exists()


def test_only_the_two_newest_states_are_kept(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, callback=_interrupt_at(45))
    kept = [p.name for _, p in ckpt.state_dirs(tmp_path)]
    assert kept == [ckpt.dir_name(22), ckpt.dir_name(45, resume=True)], kept
    _run(tmp_path)
    assert [p.name for _, p in ckpt.state_dirs(tmp_path)] == [ckpt.dir_name(45, resume=True),
                                                              ckpt.dir_name(STEPS)]


def test_keep_state_all_keeps_every_logged_state(tmp_path):
    _run(tmp_path, keep_state="all")
    assert [s for s, _ in ckpt.state_dirs(tmp_path)] == checkpoint_steps(STEPS, 5)
