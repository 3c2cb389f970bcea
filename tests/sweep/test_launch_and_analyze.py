"""The local launcher: nothing is created for a run it may not start, a failed run does not stop
the sweep (whatever `jobs` is), two sweeps over the same runs on a shared file system train
each run once, runs are spread over the GPUs given; `analyze` writes its report under the run
directory's claim."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest

from study.cli import main
from study.run.config import resolve
from study.core.claim import holds
from study.core.errors import UsageError
from study.sweep import launch
from study.sweep.launch import Slots, cores, run_local, slots
from tests.conftest import ROOT, run_cli

BASE = {"task": "counting", "model": "gru", "scale": "smoke", "analyses": "none"}


def _planned(combo):
    cfg = resolve(combo)
    return SimpleNamespace(combo=combo, cfg=cfg, path=cfg.path)


def test_a_refused_run_creates_nothing_and_the_others_still_run(tmp_path):
    foreign = tmp_path / "notes"  # someone's folder, not a run
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    fine = tmp_path / "fine"
    planned = [_planned({**BASE, "run_dir": str(p)}) for p in (foreign, fine)]
    outcome = run_local(planned, Slots(jobs=2, in_process=False))
    assert [p for p, _ in outcome.failed] == [foreign] and "not a run directory" in outcome.failed[0][1]
    assert outcome.done == [fine]
    assert sorted(p.name for p in foreign.iterdir()) == ["todo.txt"]
    assert json.loads((fine / "status.json").read_text())["status"] == "done"


class _Pool:
    """A stand-in for the launcher's processes: run i ends after i + 2 looks."""

    def __init__(self, jobs):
        self.jobs, self.running, self.started = jobs, {}, 0

    def free(self, run=None):
        return len(self.running) < self.jobs

    def busy(self):
        return bool(self.running)

    def start(self, run, tag):
        self.running[run.index], self.started = run.index + 2, self.started + 1

    def reap(self):
        for i in list(self.running):
            self.running[i] -= 1
            if not self.running[i]:
                del self.running[i]
        return []

    def stop(self, signum):
        pass


@pytest.mark.parametrize("jobs, expected", [(2, [(3, 1)]), (3, [(3, 2)]), (1, [])])
def test_the_end_of_a_sweep_is_prepared_once_on_the_first_idle_core(tmp_path, monkeypatch, jobs,
                                                                     expected):
    """`warm` (the imports the comparisons and the report need) runs once, when every run
    has started and a slot has fallen idle while others still run (runs started, runs
    running); with one slot it never does (the sweep's end imports them itself)."""
    monkeypatch.setattr(launch, "POLL_S", 0)
    pool, calls = _Pool(jobs), []
    planned = [_planned({**BASE, "seed": str(s), "run_dir": str(tmp_path / f"s{s}")})
               for s in range(3)]
    runs = deque(launch._Run(i, p.combo, p.cfg, Path(p.path)) for i, p in enumerate(planned, 1))
    launch._loop(runs, 3, pool, warm=lambda: calls.append((pool.started, len(pool.running))))
    assert pool.started == 3 and calls == expected


def test_a_failing_preparation_does_not_stop_the_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "POLL_S", 0)
    pool = _Pool(2)
    planned = [_planned({**BASE, "seed": str(s), "run_dir": str(tmp_path / f"s{s}")})
               for s in range(3)]
    runs = deque(launch._Run(i, p.combo, p.cfg, Path(p.path)) for i, p in enumerate(planned, 1))

    def broken():
        raise ImportError("no pyvene here")

    launch._loop(runs, 3, pool, warm=broken)
    assert pool.started == 3 and not pool.running


def test_a_failed_run_does_not_stop_a_one_at_a_time_sweep(tmp_path, monkeypatch, capsys):
    """Seed 0's directory holds another run (seed 5 was trained there), so seed 0 fails; seed 1
    is still trained and reported, and the sweep ends with the failure named and exit 2."""
    seed0 = resolve({**BASE, "seed": "0"}).path
    monkeypatch.chdir(tmp_path)
    assert main(["run", *(f"{k}={v}" for k, v in BASE.items()), "seed=5",
                 f"run_dir={tmp_path / seed0}"]) == 0
    capsys.readouterr()
    assert main(["sweep", *(f"{k}={v}" for k, v in BASE.items()), "seed=0,1", "jobs=1"]) == 2
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 2 runs failed") and seed0 in last and "different config" in last
    seed1 = resolve({**BASE, "seed": "1"}).path
    assert out.splitlines()[0] == seed1 and out.splitlines()[-1].startswith("report: ")
    assert json.loads((tmp_path / seed1 / "status.json").read_text())["status"] == "done"


@pytest.mark.slow  # two concurrent sweeps
def test_two_sweeps_over_the_same_runs_train_each_once(tmp_path):
    """Two machines sharing a file system (two processes here) start the same sweep at once:
    each run is claimed by one of them, the other waits for it, both end with every run
    finished and the report, and every run was trained exactly once."""
    args = [sys.executable, "-m", "study", "sweep", "task=counting", "model=gru,lstm", "scale=smoke",
            "seed=0,1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert len(out.strip().splitlines()) == 5 and out.strip().splitlines()[-1].startswith("report: ")
    runs = sorted((tmp_path / "runs").glob("counting-*"))
    assert len(runs) == 4
    for rd in runs:
        assert json.loads((rd / "status.json").read_text())["status"] == "done"
        assert (rd / "run.log").read_text().count("training from step 0") == 1, rd


def test_jobs_and_gpus_resolve_against_the_machine():
    shown = ["3", "5", "6"]  # what CUDA_VISIBLE_DEVICES lets this process see
    s = slots("", "0,2", 10, visible=shown)
    # by default each GPU holds up to a run per core it has (jobs_per_gpu=auto), so the
    # GPUs times that; one run per GPU on a machine of fewer cores than twice the GPUs
    per_gpu = max(1, min(8, cores() // 2))
    assert (s.jobs, s.gpus, s.in_process, s.per_gpu) == (2 * per_gpu, ("3", "6"), False, "auto")
    assert s.threads == max(1, cores() // s.jobs)
    assert slots("auto", "auto", 10, visible=shown).jobs == min(10, 3 * max(1, min(8, cores() // 3)))
    assert slots("", "0,2", 10, visible=shown, per_gpu="1").jobs == 2  # one run per GPU
    assert slots("auto", "auto", 2, visible=shown).jobs == 2  # never more than the runs
    assert slots("", "auto", 10, visible=[]) == Slots(jobs=1, in_process=True)
    cpu = slots("auto", "none", 100, visible=[])
    assert cpu.jobs == cores() and cpu.threads == 1 and not cpu.in_process
    with pytest.raises(UsageError, match="GPU 3 is not visible"):
        slots("", "1,3", 10, visible=shown)


def test_gpus_on_a_machine_without_one_is_refused_in_one_line(tmp_path):
    from study.run.preflight import nvidia_driver_loaded
    if nvidia_driver_loaded():
        pytest.skip("this machine has an NVIDIA driver")
    r = run_cli("sweep", "task=counting", "model=gru", "scale=smoke", "gpus=0", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: gpus=0: no NVIDIA GPU")
    assert not (tmp_path / "runs").exists()


def test_analyze_writes_the_report_holding_the_claim(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert main(["run", *(f"{k}={v}" for k, v in BASE.items()), f"run_dir={run_dir}"]) == 0
    seen = []
    import study.run.runner
    monkeypatch.setattr(study.run.runner, "write_report", lambda rd: seen.append(holds(rd.path)))
    assert main(["analyze", str(run_dir), "analysis=probes"]) == 0
    assert seen == [True]


def test_analyze_checkpoint_all_builds_a_trajectory_of_every_logged_checkpoint(tmp_path):
    import pandas as pd

    from study.train.checkpoint import list_checkpoints
    run_dir = tmp_path / "run"
    assert main(["run", *(f"{k}={v}" for k, v in BASE.items()), f"run_dir={run_dir}"]) == 0
    assert main(["analyze", str(run_dir), "analysis=probes", "checkpoint=all"]) == 0
    probes = pd.read_parquet(run_dir / "analyses" / "probes" / "probes.parquet")
    assert sorted(set(probes["checkpoint"])) == list_checkpoints(run_dir)


def test_analyze_checkpoint_all_with_a_trajectory_loads_each_checkpoint_once_more_at_most(
        tmp_path, monkeypatch):
    """checkpoint=all with circuits.trajectory=true: every step's rows are there, and an
    earlier step is not re-scored by each later one (only the latest step walks the trajectory)."""
    import pandas as pd

    import study.train.checkpoint as checkpoint
    from study.train.checkpoint import list_checkpoints
    run_dir = tmp_path / "run"
    args = {"task": "assign_add", "model": "attn2", "scale": "smoke", "analyses": ""}
    assert main(["run", *(f"{k}={v}" for k, v in args.items()), f"run_dir={run_dir}"]) == 0
    loads = []
    real = checkpoint.load_model
    monkeypatch.setattr(checkpoint, "load_model", lambda path, step: loads.append(step) or real(path, step))
    assert main(["analyze", str(run_dir), "analysis=circuits", "checkpoint=all",
                 "circuits.trajectory=true", "circuits.ablation="]) == 0
    have = list_checkpoints(run_dir)
    assert len(have) >= 3
    circuits = pd.read_parquet(run_dir / "analyses" / "circuits" / "circuits.parquet")
    assert sorted(set(circuits["checkpoint"])) == have
    assert len(loads) == 2 * len(have) - 1  # each step once, and the trajectory of the latest


def test_reanalysing_replaces_the_rows_of_the_checkpoints_it_writes(tmp_path):
    """das_control's rows name step 0 whatever checkpoint is analysed: analysing again
    replaces them instead of stacking a second copy; other checkpoints' rows stay."""
    import pandas as pd

    from study.run.analyze import _merge_checkpoints
    path = tmp_path / "das_control.parquet"
    pd.DataFrame({"checkpoint": [0, 0, 7], "iia": [0.1, 0.2, 0.9]}).to_parquet(path)
    merged = _merge_checkpoints(path, pd.DataFrame({"checkpoint": [0, 0], "iia": [0.3, 0.4]}), 50)
    assert sorted(merged["iia"]) == [0.3, 0.4, 0.9]
    merged = _merge_checkpoints(path, pd.DataFrame({"iia": [0.5]}), 7)  # no column: the step
    assert sorted(merged["iia"]) == [0.1, 0.2, 0.5]
