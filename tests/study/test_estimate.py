"""A default never starts a multi-hour CPU run by surprise: a run estimated (by a probe of its
own training step) to train for over an hour here is refused in one line before anything is
written, naming the estimate, the faster choices and `long=ok`."""
import subprocess
import sys

import pytest

from study.api import build_task
from study.config import resolve
from study.core.errors import UsageError
from study.estimate import check_duration, duration, measure

LONG = {"task": "counting", "model": "gru", "scale": "smoke", "train.device": "cpu",
        "train.steps": "50000000"}


def test_a_cpu_run_of_many_hours_is_refused_in_one_line_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "r"
    args = [f"{k}={v}" for k, v in {**LONG, "run_dir": str(run_dir)}.items()]
    r = subprocess.run([sys.executable, "-m", "study", "run", *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: this run would train for about "), r.stderr
    assert " h " in lines[0] and "50,000,000 steps" in lines[0]
    assert "scale=small" in lines[0] and "long=ok" in lines[0]
    assert not run_dir.exists()


def test_long_ok_lets_it_start_and_a_resumed_run_counts_only_the_steps_left():
    cfg = resolve(LONG)
    task = build_task(cfg)
    with pytest.raises(UsageError, match="long=ok"):
        check_duration(cfg, task, cfg.train.steps, allow_long=False, on_cpu=True)
    check_duration(cfg, task, cfg.train.steps, allow_long=True, on_cpu=True)
    check_duration(cfg, task, 10, allow_long=False, on_cpu=True)  # 10 steps left: seconds
    check_duration(cfg, task, cfg.train.steps, allow_long=False, on_cpu=False)  # a GPU run


def test_the_probe_times_real_training_steps():
    cfg = resolve({**LONG, "train.steps": "100"})
    m = measure(cfg, build_task(cfg), seconds=0.2, warm=1)
    assert m.steps >= 2 and m.seconds > 0 and m.steps_per_s > 0 and m.tokens > 0


def test_a_bad_long_value_is_one_line():
    r = subprocess.run([sys.executable, "-m", "study", "run", "task=counting", "model=gru",
                        "long=yes"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "long='yes'" in r.stderr and "long=ok" in r.stderr


@pytest.mark.parametrize("seconds, text", [(12, "12 s"), (840, "14 min"), (17580, "4 h 53 min")])
def test_durations_read_as_people_say_them(seconds, text):
    assert duration(seconds) == text
