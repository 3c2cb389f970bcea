"""A default never starts a multi-hour CPU run by surprise: a run estimated (by a probe of its
own training step, and its analyses priced from it) to work for over an hour here is refused
in one line before anything is written, naming the estimate by part, the rate, the faster
choices and `long=ok`."""
import subprocess
import sys

import pytest

from study.run.build import build_task
from study.run.config import resolve
from study.core.errors import UsageError
from study.run.estimate import check_duration, duration, measure, rate

LONG = {"task": "counting", "model": "gru", "scale": "smoke", "train.device": "cpu",
        "train.steps": "50000000"}


def test_a_cpu_run_of_many_hours_is_refused_in_one_line_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "r"
    args = [f"{k}={v}" for k, v in {**LONG, "run_dir": str(run_dir), "analyses": "none"}.items()]
    r = subprocess.run([sys.executable, "-m", "study", "run", *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: this run would take about "), r.stderr
    assert "days" in lines[0] and "50,000,000 steps" in lines[0] and "no analyses" in lines[0]
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


@pytest.mark.parametrize("seconds, text", [(12, "12 s"), (840, "14 min"), (17580, "4 h 53 min"),
                                           (30 * 86400, "30 days"), (4e10, "1,268 years")])
def test_durations_read_as_people_say_them(seconds, text):
    assert duration(seconds) == text


# --- a sweep: the same hour, over the runs it would train on this CPU ----------------------

SWEEP = ["sweep", "task=counting", "model=gru", "scale=smoke", "train.device=cpu",
         "train.steps=2000", "seed=0,1"]  # no analyses: training alone


@pytest.fixture
def one_step_per_second(monkeypatch):
    """Every probe measures one training step per second (no torch work), and the optimistic
    bound never settles it first; returns the probes made."""
    import study.run.estimate as estimate
    probes = []

    def probe_(cfg, task, seconds=0.0):
        probes.append(cfg.seed)
        return 1.0

    monkeypatch.setattr(estimate, "probe", probe_)
    monkeypatch.setattr(estimate, "optimistic_seconds", lambda *a, **k: 1e9)
    return probes


def test_a_cpu_sweep_over_an_hour_in_all_is_refused_in_one_line_before_anything_is_written(
        tmp_path, monkeypatch, capsys, one_step_per_second):
    """Two runs of 2,000 s each (and their evaluations), one at a time: each alone is under the
    hour, the sweep is not.
    One probe serves both (the same settings but the seed)."""
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(SWEEP) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: this sweep would take about 1 h 7 min"), err
    assert "2 runs, 1 at once" in err[0] and "2,000 steps at 1.0 s a step" in err[0]
    assert "training 1 h 7 min, analyses 0 s, comparisons 0 s" in err[0]
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
    assert out.err.startswith("error: this sweep would take about") and "long=ok" in out.err


def test_a_slurm_sweep_is_not_held_back(tmp_path, monkeypatch, capsys, one_step_per_second):
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    assert main([*SWEEP, "launcher=slurm", "dry_run=true"]) == 0
    assert one_step_per_second == [] and "error" not in capsys.readouterr().err


# --- the headline command on a laptop: an answer in seconds, naming what works -------------

@pytest.mark.parametrize("step_s, text", [(0.05, "20.0 steps/s"), (0.4, "2.50 steps/s"),
                                          (48.3, "48 s a step"), (2.5, "2.5 s a step")])
def test_a_rate_reads_in_units_that_never_round_to_zero(step_s, text):
    assert rate(step_s) == text


def test_a_paper_size_step_is_priced_from_the_matmul_rate_without_building_the_network(
        monkeypatch):
    """gpt12 at scale=paper takes tens of seconds a step on a CPU: the probe prices it (FLOPs
    at the engine's share of this CPU's matmul rate) in well under a second of work, and a
    faster CPU gives a proportionally shorter step."""
    import study.run.estimate as estimate
    cfg = resolve({"task": "binding", "model": "gpt12"})
    task = build_task(cfg)

    def no_network(*a, **k):
        raise AssertionError("the probe trained the paper-size network")

    monkeypatch.setattr("study.train.engine.Engine", no_network)
    monkeypatch.setattr(estimate, "matmul_rate", lambda: 1e11)
    slow = estimate.probe(cfg, task)
    monkeypatch.setattr(estimate, "matmul_rate", lambda: 2e11)
    assert estimate.probe(cfg, task) == pytest.approx(slow / 2)
    assert 1 < slow < 100  # seconds a step: 6 FLOPs per parameter and token at 45 % of 100 GFLOP/s


def test_the_headline_command_is_refused_naming_the_laptop_variant_with_its_estimate(
        tmp_path, monkeypatch, capsys):
    """`run task=binding model=gpt12` on a CPU: refused with the estimate of the paper run by
    part (training, patching, DAS) and the command that works, `scale=small`, with its own."""
    import study.run.estimate as estimate
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimate, "probe",
                        lambda cfg, task, seconds=0.0: 20.0 if cfg.scale == "paper" else 0.05)
    monkeypatch.setattr("study.run.preflight.nvidia_driver_loaded", lambda: False)
    assert main(["run", "task=binding", "model=gpt12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("error: this run would take about ") and "20 s a step" in line
    assert "training 25 days" in line and "patching" in line and "das" in line
    assert "`python -m study run task=binding model=gpt12 scale=small`" in line
    assert "long=ok" in line.split("`")[-1]  # the escape for this run, not the variant's
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_fits_the_hour_probes_nothing_not_even_its_laptop_variant(tmp_path,
                                                                             monkeypatch):
    """A smoke run fits the hour by the optimistic bound alone: `run` times no training step,
    of its own network or of the scale=small variant it would name only in a refusal."""
    import study.run.estimate as estimate
    from study.commands import _check_duration

    def no_probe(*a, **k):
        raise AssertionError("a step was probed for a run that fits the hour")

    monkeypatch.setattr(estimate, "probe", no_probe)
    monkeypatch.setattr("study.run.preflight.nvidia_driver_loaded", lambda: False)
    kv = {"task": "binding", "model": "gru", "scale": "smoke", "run_dir": str(tmp_path / "r")}
    assert _check_duration(resolve(kv), False, kv) is None
    assert not (tmp_path / "r").exists()


def test_a_sweep_estimate_says_its_training_analyses_and_comparisons(tmp_path, monkeypatch,
                                                                     capsys):
    """Two runs with DAS, 30 s a step (20 steps and 24 evaluations each): the analyses (priced
    from the step) and the comparisons across the runs at the sweep's end are counted and
    named beside the training, and DAS counts for more than the same runs' training (as in
    every study measured)."""
    import re

    import study.run.estimate as estimate
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimate, "probe", lambda cfg, task, seconds=0.0: 30.0)
    monkeypatch.setattr(estimate, "optimistic_seconds", lambda *a, **k: 1e9)
    sweep = [a for a in SWEEP if not a.startswith("train.steps")]
    assert main([*sweep, "analyses=das", "train.steps=20", "dry_run=true"]) == 2
    err = capsys.readouterr().err.strip()
    got = re.search(r"training (.+?), analyses (.+?), comparisons (.+?);", err)
    assert got is not None, err
    assert got[1] == "36 min" and " h " in got[2] and got[3] != "0 s", err
    assert "(das " in err and "long=ok" in err


def test_the_analysis_estimate_matches_the_binding_study_it_is_calibrated_on():
    """Each recorded run of results/binding-2026-11-28: its analyses' time (wall time less
    training) against the estimate from its own training step: the median within 25 %, each
    within a factor 3 (early stops vary by seed)."""
    import json
    import statistics
    from pathlib import Path

    from study.run.analysis_time import analysis_seconds
    from study.run.config import from_dict
    manifest = json.loads((Path(__file__).parents[2] / "results" / "binding-2026-11-28"
                           / "manifest.json").read_text())
    ratios = []
    for r in manifest["runs"]:
        cfg = from_dict(r["config"])
        step = r["train_time_s"] / r["steps_done"]
        estimated = sum(analysis_seconds(cfg, build_task(cfg), step).values())
        ratios.append((r["wall_time_s"] - r["train_time_s"]) / estimated)
    resumed = [x for x in ratios if x < 1 / 3]  # two gpt12 runs resumed with their DAS done
    assert len(resumed) <= 2
    kept = [x for x in ratios if x >= 1 / 3]
    assert 0.75 < statistics.median(kept) < 1.25 and max(kept) < 3, ratios


def test_the_gpu_estimate_of_a_run_says_its_training_and_its_das():
    """`python -m study.sweep.gpu_time`: a run's time is its start, its training steps and its
    DAS updates (the search and its controls), each said; a run without DAS has none."""
    from study.sweep import gpu_time
    est = gpu_time.Estimator()
    kv = {"task": "counting", "model": "gru", "scale": "smoke", "train.steps": "50"}
    with_das = est.run(resolve({**kv, "analyses": "das", "das.k": "1,2"}))
    assert with_das.das > 0 and with_das.training > 0
    assert with_das.seconds == pytest.approx(gpu_time.START_S + with_das.training + with_das.das)
    alone = est.run(resolve(kv))
    assert alone.das == 0 and alone.training == pytest.approx(with_das.training)


def test_the_atlas_is_priced_by_its_grid():
    """The atlas's estimate counts its grid: each variable screened at every role of every
    layer with both controls, then its full searches. Twice the variables is twice the time;
    a transformer's every residual stream is screened (rope2 at small: three, against the
    GRU's one state), and a one-variable atlas of the counting GRU at small, from its
    measured training step, is minutes, as `bench atlas` measures it (244 CPU s for the
    screening alone, 2026-12-06), not seconds."""
    from study.run.analysis_time import atlas_seconds
    kv = {"task": "counting", "scale": "small", "analyses": "atlas"}
    gru = resolve({**kv, "model": "gru", "atlas.variables": "up_down:count"})
    two = resolve({**kv, "model": "gru", "atlas.variables": "up_down:count,up_down:phase"})
    task = build_task(gru)
    one_s = atlas_seconds(gru, task, 0.16, recurrent=True)
    assert atlas_seconds(two, task, 0.16, recurrent=True) == pytest.approx(2 * one_s)
    assert 120 < one_s < 1200
    # the screening alone (no full search updates) at three layers and at one
    rope = resolve({**kv, "model": "rope2", "atlas.variables": "up_down:count",
                    "atlas.steps": "0"})
    one_layer = resolve({**kv, "model": "rope2", "atlas.variables": "up_down:count",
                         "atlas.steps": "0", "atlas.layers": "1"})
    assert (atlas_seconds(rope, task, 0.16, recurrent=False)
            > 2.5 * atlas_seconds(one_layer, task, 0.16, recurrent=False))
