"""SLURM's pre-timeout signals stop training like Ctrl-C: deferred to the end of the step,
which writes a resume point; the exception says which signal it was."""
from __future__ import annotations

import os
import signal

import pytest

from study.run.config import train_config
from study.core.registry import get
from study.core.rundir import RunDir
from study.core.signals import Interrupted, exit_code
from study.train import checkpoint as ckpt
from study.train.loop import train

TASK, MODEL = get("task", "counting"), get("model", "gru")


def _run(path, callback=None):
    cfg = train_config(TASK, "smoke", {"steps": 40, "checkpoints": 4, "resume_minutes": 0})
    return train(RunDir(path), TASK.obj(TASK.make_config("smoke")), MODEL,
                 MODEL.make_config("smoke"), cfg, 0, callback=callback)


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM])
def test_stop_signal_is_deferred_to_a_resume_point(tmp_path, signum):
    def send(step):
        if step == 13:
            os.kill(os.getpid(), signum)

    before = signal.getsignal(signum)
    with pytest.raises(Interrupted) as stopped:
        _run(tmp_path, callback=send)
    assert stopped.value.signum == signum and exit_code(stopped.value) == 128 + signum
    assert ckpt.latest(tmp_path).name == ckpt.dir_name(13, resume=True)
    assert signal.getsignal(signum) == before  # the previous handler is back
    assert _run(tmp_path)["steps_done"] == 40


def test_exit_codes():
    assert exit_code(KeyboardInterrupt()) == 130
    assert exit_code(Interrupted(signal.SIGTERM)) == 143
    assert exit_code(Interrupted(signal.SIGUSR1)) == 128 + signal.SIGUSR1
