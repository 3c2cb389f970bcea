"""The exclusive claim on a run directory: a live holder refuses others (naming itself), a
dead or silent one is taken over, and the claim file goes when the holder is done."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from study.core import claim as claim_mod
from study.core.claim import CLAIM, ClaimedError, acquire, claim
from tests.conftest import ROOT, run_cli

HOLD = ("import sys, time; from study.core.claim import claim\n"
        "with claim(sys.argv[1], 'test holder'):\n"
        "    print('held', flush=True); time.sleep(120)\n")


@pytest.fixture
def holder(tmp_path):
    """A separate process holding the claim on tmp_path/r."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "held"
        yield run_dir, proc
    finally:
        proc.kill()
        proc.wait()


def test_a_second_process_is_refused_naming_the_holder(holder):
    run_dir, proc = holder
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "keep").write_text("first run's")
    r = run_cli("run", "task=counting", "model=gru", "scale=smoke", "analyses=none", "seed=1",
                "force=true", f"run_dir={run_dir}")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"pid {proc.pid}" in r.stderr and socket.gethostname() in r.stderr and "since" in r.stderr
    assert (run_dir / "checkpoints" / "keep").read_text() == "first run's"
    assert not (run_dir / "config.json").exists()


def test_analyze_is_refused_while_a_run_holds_the_directory(holder):
    run_dir, proc = holder
    with pytest.raises(ClaimedError, match=f"pid {proc.pid}"):
        acquire(run_dir, "analyze")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_claim_of_a_dead_process_is_taken_over_with_a_notice(tmp_path, capsys):
    (tmp_path / CLAIM).write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(),
                                              "since": time.time(), "token": "old"}))
    with claim(tmp_path, "test") as info:
        held = json.loads((tmp_path / CLAIM).read_text())
        assert held["pid"] == os.getpid() and held["token"] == info["token"]
    assert "took over the stale claim" in capsys.readouterr().err
    assert not (tmp_path / CLAIM).exists()


def test_a_silent_claim_of_another_host_is_stale_a_fresh_one_is_not(tmp_path):
    lock = tmp_path / CLAIM
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": time.time()}))
    with pytest.raises(ClaimedError, match="host elsewhere"):
        acquire(tmp_path)
    old = time.time() - claim_mod.STALE_AFTER_S - 60
    os.utime(lock, (old, old))
    with claim(tmp_path):
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_the_heartbeat_refreshes_the_claim_and_reentry_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setattr(claim_mod, "HEARTBEAT_S", 0.05)
    with claim(tmp_path):
        lock = tmp_path / CLAIM
        old = time.time() - 100
        os.utime(lock, (old, old))
        time.sleep(0.3)
        assert time.time() - lock.stat().st_mtime < 5
        with claim(tmp_path):  # the same process again: nested, not refused
            pass
        assert lock.exists()
    assert not lock.exists()


@pytest.mark.slow  # a sweep waiting on a held run
def test_a_sweep_leaves_a_held_run_to_its_holder_then_runs_it(tmp_path):
    """A run another live process holds is not touched; once the holder lets go without
    finishing it, the sweep takes it and trains it."""
    from study.run.config import resolve
    cfg = resolve({"task": "counting", "model": "gru", "scale": "smoke"})
    run_dir = tmp_path / cfg.path
    run_dir.mkdir(parents=True)
    script = HOLD.replace("time.sleep(120)", "time.sleep(3)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(run_dir)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "held"
        r = run_cli("sweep", "task=counting", "model=gru", "scale=smoke", cwd=tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 0, r.stderr
    assert f"held by pid {proc.pid}" in r.stderr  # left to the holder while it lived
    assert json.loads((run_dir / "status.json").read_text())["status"] == "done"
    log = (run_dir / "run.log").read_text()
    assert log.count("training from step 0") == 1
