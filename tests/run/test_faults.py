"""Fault injection: a real `python -m study run` killed (SIGKILL) at varied points, or stopped
by SIGTERM mid-training, then re-run, ends with the same final weights, metrics and analysis
tables as a run never interrupted."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import ROOT

ARGS = ["task=counting", "model=gru", "scale=smoke", "train.steps=200", "analyses=probes"]


def _start(run_dir: Path) -> subprocess.Popen:
    # one thread: small models run fastest that way, and tests share the cores
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "study", "run", *ARGS, f"run_dir={run_dir}"],
                            cwd=run_dir.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _run(run_dir: Path) -> subprocess.CompletedProcess:
    proc = _start(run_dir)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _wait_for(proc: subprocess.Popen, path: Path, timeout: float = 300) -> None:
    """Poll until `path` exists (the moment to strike); fail if the run ends first."""
    end = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the run ended before {path} appeared: {proc.communicate()[1][-2000:]}"
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.005)


def _final(run_dir: Path) -> dict:
    steps = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_"))
    return load_file(str(run_dir / "checkpoints" / steps[-1] / "model.safetensors"))


def _assert_same(a: Path, b: Path) -> None:
    wa, wb = _final(a), _final(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    for table in ("metrics.parquet", "analyses/probes/probes.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(a / table), pd.read_parquet(b / table),
                                      check_exact=True)
    assert json.loads((b / "status.json").read_text())["status"] == "done"


# each case runs, kills and reruns `python -m study run` in subprocesses: minutes in all
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "uninterrupted"
    _run(path)
    return path


# where the kill lands: before training began, between logged checkpoints (no resume point:
# SIGKILL cannot be deferred), and during the analyses after training
KILL_POINTS = {
    "early": "status.json",
    "between_checkpoints": "checkpoints/step_00000001/meta.json",
    "during_analyses": "analyses/probes",
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_sigkill_then_rerun_equals_uninterrupted(tmp_path, reference, point):
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    _wait_for(proc, run_dir / KILL_POINTS[point])
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    rerun = _run(run_dir)  # the dead process's claim is stale: taken over with a notice
    assert "took over the stale claim" in rerun.stderr
    _assert_same(reference, run_dir)


def test_sigterm_mid_training_writes_a_resume_point_then_resumes(tmp_path, reference):
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    _wait_for(proc, run_dir / "checkpoints/step_00000001/meta.json")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]  # 143
    assert err.strip().splitlines()[-1] == "interrupted (SIGTERM); re-run the same command to resume"
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "interrupted" and status["signal"] == "SIGTERM"
    # the step the signal arrived in ended with a state (a resume point, or a logged checkpoint
    # if it was due then) before the end of training
    stopped = max(int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").iterdir()
                  if (p / "state.pt").exists())
    assert 1 <= stopped < 200
    assert not (run_dir / ".study-claim").exists()  # released on the way out
    rerun = _run(run_dir)
    assert "stale claim" not in rerun.stderr
    _assert_same(reference, run_dir)
