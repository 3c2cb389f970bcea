"""`launcher=slurm` against a real one-node SLURM (Debian's slurm-wlm, started for these tests
by `slurm_cluster.py` and ended by PID): a smoke sweep is submitted as a job array with its
report as a dependent job, `status` follows it, and a run that outlives a one-minute time limit
is signalled, requeued and resumed, ending bit-equal to an uninterrupted run. Skipped, with
the reason, where SLURM cannot be installed or started (not root, no apt-get)."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from study.train import checkpoint as ckpt
from tests.conftest import ROOT, run_cli
from tests.sweep import slurm_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow]  # a cluster started and ended: minutes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if importlib.util.find_spec("submitit") is None:
        pytest.skip("submitit is not installed: pip install -e '.' (make setup does this)")
    try:
        c = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    except slurm_cluster.Unavailable as e:
        pytest.skip(f"no SLURM cluster for the tests: {e}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = c.env["SLURM_CONF"]
    try:
        yield c
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        c.stop()


def _status(sweep_dir, cwd):
    r = run_cli("status", str(sweep_dir), cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_smoke_sweep_through_slurm(cluster, tmp_path):
    args = ["sweep", "task=counting", "model=gru,lstm", "scale=smoke", "analyses=probes",
            "launcher=slurm", "slurm.cpus=1", "slurm.time=10"]
    sub = run_cli(*args, "wait=false", cwd=tmp_path)
    assert sub.returncode == 0, sub.stderr
    m = re.search(r"submitted 2 runs as job array (\d+) .* the report as job (\d+) after it", sub.stdout)
    assert m, sub.stdout
    array, report_job = m.groups()
    sweep_dir = re.search(r"status: python -m study status (\S+)", sub.stdout).group(1)
    first = _status(sweep_dir, tmp_path)  # right after submission: nothing has failed
    assert re.search(r"\d+ done, \d+ running, 0 failed, 0 interrupted, \d+ pending \(of 2\)", first)
    assert f"slurm array job {array}:" in first and f"slurm report job {report_job}:" in first

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the report job runs after the array
        out = _status(sweep_dir, tmp_path)
        if f"slurm report job {report_job}: 1 completed" in out:
            break
        assert "failed" not in out.split("slurm")[1], out  # no job failed on the way
        time.sleep(2)
    else:
        pytest.fail(f"the sweep did not end in 5 minutes:\n{out}\n{cluster.log('slurmctld.log')[-2000:]}")
    assert "2 done, 0 running, 0 failed, 0 interrupted, 0 pending (of 2)" in out
    assert f"slurm array job {array}: 2 completed" in out
    report = out.strip().splitlines()[-1].removeprefix("report: ")
    page = open(report).read()
    assert "gru s0" in page and "lstm s0" in page

    record = json.loads((tmp_path / sweep_dir / "sweep.json").read_text())
    for i, run in enumerate(record["runs"]):
        assert json.loads(open(f"{run['path']}/status.json").read())["status"] == "done"
        assert "training from step 0" in open(f"{run['path']}/run.log").read()
        task_log = (tmp_path / sweep_dir / "slurm" / f"{array}_{i}" / f"{array}_{i}_0_log.err").read_text()
        assert f"trained {run['model']} on counting" in task_log  # the SLURM log shows the run

    again = run_cli(*args, cwd=tmp_path)  # everything is finished: nothing is submitted
    assert again.returncode == 0, again.stderr
    assert "all 2 runs are finished" in again.stderr and "submitted" not in again.stderr
    assert again.stdout.strip().splitlines()[-1] == f"report: {report}"


def _speed(tmp_path) -> float:
    """Training steps per second of the requeued run's settings here, now, on one thread as
    the SLURM task (slurm.cpus=1) trains."""
    r = subprocess.run([sys.executable, "-m", "study", "run", *RUN, "train.steps=100",
                        "train.checkpoints=1", f"run_dir={tmp_path / 'speed'}"],
                       env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads((tmp_path / "speed" / "summary.json").read_text())["steps_per_s"]


RUN = ["task=counting", "model=gru", "scale=smoke", "analyses=none"]


def test_a_run_past_its_time_limit_is_requeued_and_ends_bit_equal(cluster, tmp_path):
    """slurm.time=1 (minute): SLURM signals the task 15 s before its limit, the run writes a
    resume point, submitit requeues the task, and the requeued task resumes the run. SLURM
    checks time limits every 30 s and signals up to that much early, so the signal comes
    15-45 s into the job; the run is sized to train for about 90 s here, so that it is still
    training then however much faster than the measured speed it runs (a requeued attempt may be
    signalled again: each resumes where the last stopped)."""
    steps = max(400, int(90 * _speed(tmp_path)))  # trains past the latest signal, however fast
    run = [*RUN, f"train.steps={steps}", "train.checkpoints=4"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    reference = subprocess.Popen([sys.executable, "-m", "study", "run", *run,
                                  f"run_dir={tmp_path / 'reference'}"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    (tmp_path / "slurm").mkdir()
    r = run_cli("sweep", *run, "launcher=slurm", "slurm.cpus=1", "slurm.time=1",
                "slurm.signal_delay_s=15", cwd=tmp_path / "slurm", timeout=1200)
    assert reference.wait(timeout=600) == 0, reference.stderr.read()[-2000:]
    assert r.returncode == 0, r.stderr[-3000:]
    assert "submitted 1 runs as job array" in r.stderr
    run_dir = tmp_path / "slurm" / r.stdout.splitlines()[0]  # as a local sweep prints it
    log = (run_dir / "run.log").read_text()
    resumed = [int(s) for s in re.findall(r"resuming from step (\d+)", log)]
    assert resumed and resumed[-1] > 0, log  # it was stopped at a resume point and resumed
    assert "interrupted by SIGUSR2" in log
    task_logs = "".join(p.read_text() for p in (tmp_path / "slurm" / "runs").glob("sweep-*/slurm/*/*_log.*"))
    assert "Requeued job" in task_logs  # by submitit, after SLURM's signal
    assert json.loads((run_dir / "status.json").read_text())["status"] == "done"

    a = load_file(ckpt.latest(tmp_path / "reference") / ckpt.WEIGHTS)
    b = load_file(ckpt.latest(run_dir) / ckpt.WEIGHTS)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "reference" / "metrics.parquet"),
                                  pd.read_parquet(run_dir / "metrics.parquet"), check_exact=True)
    assert ckpt.list_checkpoints(tmp_path / "reference") == ckpt.list_checkpoints(run_dir)


def test_runs_packed_into_one_array_task_share_it_and_finish(cluster, tmp_path):
    """jobs_per_gpu=2 on a CPU job: the two runs are one array task, side by side, each with
    its share of the task's cores; both finish and the report lists them."""
    args = ["sweep", "task=counting", "model=gru,lstm", "scale=smoke", "analyses=",
            "launcher=slurm", "slurm.cpus=2", "slurm.time=10", "jobs_per_gpu=2"]
    r = run_cli(*args, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"submitted 2 runs in 1 tasks as job array (\d+)", r.stderr)
    assert m, r.stderr[-2000:]
    runs = [tmp_path / line for line in r.stdout.strip().splitlines()[:-1]]
    assert len(runs) == 2
    for rd in runs:
        assert json.loads((rd / "status.json").read_text())["status"] == "done"
    # one task (a one-task array is a plain job: its folder is the job id)
    logs = list((tmp_path / "runs").glob(f"sweep-*/slurm/{m.group(1)}*/*_log.err"))
    assert len(logs) == 1, logs
    assert logs[0].read_text().count("starting: python -m study run") == 2  # both in it
