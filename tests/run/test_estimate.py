"""A default never starts a multi-hour CPU run by surprise: a run estimated (by a probe of its
own training step) to train for over an hour here is refused in one line before anything is
written, naming the estimate, the faster choices and `long=ok`."""
import subprocess
import sys

import pytest

from study.run.build import build_task
from study.run.config import resolve
from study.core.errors import UsageError
from study.run.estimate import check_duration, duration, measure

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


def test_a_run_bounded_by_max_minutes_is_not_long_however_many_steps_it_asks_for():
    task = build_task(resolve(LONG))
    check_duration(resolve({**LONG, "runtime.max_minutes": "30"}), task, 50_000_000,
                   allow_long=False, on_cpu=True)
    with pytest.raises(UsageError, match=r"runtime.max_minutes=N"):
        check_duration(resolve({**LONG, "runtime.max_minutes": "90"}), task, 50_000_000,
                       allow_long=False, on_cpu=True)


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


# --- a sweep: the same hour, over the runs it would train on this CPU ----------------------

SWEEP = ["sweep", "task=counting", "model=gru", "scale=smoke", "train.device=cpu",
         "train.steps=2000", "seed=0,1"]


@pytest.fixture
def one_step_per_second(monkeypatch):
    """Every probe measures one training step per second (no torch work), and the optimistic
    bound never settles it first; returns the probes made."""
    import study.run.estimate as estimate
    probes = []

    def measure_(cfg, task, seconds=0.0, warm=0):
        probes.append(cfg.seed)
        return estimate.Measured(steps=2, seconds=2.0, setup=0.0, tokens=1.0, runtime=None)

    monkeypatch.setattr(estimate, "measure", measure_)
    monkeypatch.setattr(estimate, "optimistic_seconds", lambda *a, **k: 1e9)
    return probes


def test_a_cpu_sweep_over_an_hour_in_all_is_refused_in_one_line_before_anything_is_written(
        tmp_path, monkeypatch, capsys, one_step_per_second):
    """Two runs of 2,000 s each, one at a time: each alone is under the hour, the sweep is not.
    One probe serves both (the same settings but the seed)."""
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(SWEEP) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: this sweep would train for about 1 h 6 min"), err
    assert "2 runs, 1 at once" in err[0] and "2,000 steps at 1.0 steps/s" in err[0]
    assert "long=ok" in err[0] and "scale=small" in err[0]
    assert one_step_per_second == [0]
    assert list(tmp_path.iterdir()) == []  # no sweep record, no run directory


@pytest.mark.parametrize("extra, shown", [
    (["long=ok"], "would run 2 of 2 runs here: 1 at once"),  # the escape, as for one run
    (["jobs=2"], "would run 2 of 2 runs here: 2 at once"),  # two at once: 2,000 s in all
])
def test_long_ok_or_runs_at_once_within_the_hour_let_the_sweep_start(
        tmp_path, monkeypatch, capsys, one_step_per_second, extra, shown):
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    assert main([*SWEEP, *extra, "dry_run=true"]) == 0
    out = capsys.readouterr()
    assert shown in out.out and "error" not in out.err


def test_a_dry_run_shows_the_plan_then_the_refusal(tmp_path, monkeypatch, capsys,
                                                   one_step_per_second):
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    assert main([*SWEEP, "dry_run=true"]) == 2
    out = capsys.readouterr()
    assert "would run 2 of 2 runs here" in out.out
    assert out.err.startswith("error: this sweep would train for about") and "long=ok" in out.err


def test_a_slurm_sweep_is_not_held_back(tmp_path, monkeypatch, capsys, one_step_per_second):
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    assert main([*SWEEP, "launcher=slurm", "dry_run=true"]) == 0
    assert one_step_per_second == [] and "error" not in capsys.readouterr().err
