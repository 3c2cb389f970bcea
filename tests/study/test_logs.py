"""Logs a cluster user can read: with stderr not a terminal (a SLURM log), training prints a
plain progress line every `train.progress_seconds` (step, loss, accuracy, tokens/s, ETA), and
every run directory keeps `run.log` with what the run said, across resumptions."""
from __future__ import annotations

import io
import re
import sys

from study.cli import main
from study.core import runlog
from tests.conftest import run_cli

LINE = re.compile(r"^counting/gru step (\d+)/60 \(\d+%\) loss \d+\.\d+ acc (-|\d\.\d+) "
                  r"tokens/s \S+ ETA (\?|\d+[hms]\S*)$", re.M)
ARGS = ["run", "task=counting", "model=gru", "scale=smoke", "train.steps=60", "train.log_every=5"]


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    run_dir = tmp_path / "r"
    r = run_cli(*ARGS, "train.progress_seconds=0.000001", f"run_dir={run_dir}")
    assert r.returncode == 0, r.stderr
    steps = [int(m.group(1)) for m in LINE.finditer(r.stderr)]
    assert steps and steps == sorted(steps) and steps[-1] == 60  # one per log row here
    log = (run_dir / "run.log").read_text()
    assert [int(m.group(1)) for m in LINE.finditer(log)] == steps
    assert "trained gru on counting" in log and "training from step 0 to 60" in log


def test_no_progress_lines_when_asked_for_none(tmp_path):
    r = run_cli(*ARGS, "train.progress_seconds=0", f"run_dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert not LINE.search(r.stderr)


def test_run_log_of_an_in_process_run_keeps_every_session(tmp_path, monkeypatch):
    """A run started in this process copies its stderr into run.log; a second session on the
    same directory (here: adding an analysis) appends to it."""
    run_dir = tmp_path / "r"
    fake = io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main([*ARGS, f"run_dir={run_dir}"]) == 0
    assert main([*ARGS, "analyses=probes", f"run_dir={run_dir}"]) == 0
    assert sys.stderr is fake  # the copy ends with the run
    log = (run_dir / "run.log").read_text()
    assert log.count("counting × gru seed 0 on ") == 2
    assert "training from step 0 to 60" in log and "already finished" in log
    assert "analysis probes on" in log
    assert all(line in fake.getvalue() for line in log.splitlines())


def test_tee_is_a_no_op_when_stderr_is_the_log(tmp_path, monkeypatch):
    path = tmp_path / "run.log"
    with open(path, "w") as f:
        monkeypatch.setattr(sys, "stderr", f)
        with runlog.mirrored(path):
            assert sys.stderr is f and not runlog.copying()
            print("once", file=sys.stderr)
    assert path.read_text() == "once\n"
