"""Logs a cluster user can read: with stderr not a terminal (a SLURM log), training prints a
plain progress line every `train.progress_seconds` (step, loss, accuracy, tokens/s, ETA), and
every run directory keeps `run.log` with what the run said, each line with its time, across
resumptions, with the wall time of each stage and a line at least every 30 s of a long one.
What the library says goes through the `study` logger, which a program using it can silence
or route with the standard logging API."""
from __future__ import annotations

import io
import json
import logging
import re
import sys
import time

import pytest

from study.cli import main
from study.core import progress, runlog
from tests.conftest import run_cli

STAMP = r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d )?"  # run.log's lines begin with their time
LINE = re.compile(rf"^{STAMP}counting/gru step (\d+)/60 \(\d+%\) loss \d+\.\d+ val acc (-|\d\.\d+)"
                  r"(?: \(step \d+\))? tokens/s \S+ ETA (\?|\d+[hms]\S*)$", re.M)
ARGS = ["run", "task=counting", "model=gru", "scale=smoke", "train.steps=60", "train.log_every=5",
        "analyses=none"]


@pytest.mark.slow  # a subprocess run paced by progress_seconds
def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    run_dir = tmp_path / "r"
    r = run_cli(*ARGS, "train.progress_seconds=0.000001", f"run_dir={run_dir}")
    assert r.returncode == 0, r.stderr
    steps = [int(m.group(1)) for m in LINE.finditer(r.stderr)]
    assert steps and steps == sorted(steps) and steps[-1] == 60  # one per log row here
    log = (run_dir / "run.log").read_text()
    assert [int(m.group(1)) for m in LINE.finditer(log)] == steps
    assert "trained gru on counting" in log and "training from step 0 to 60" in log
    # the last line shows the final evaluation, the one summary.json reports
    last = re.findall(r"step 60/60 loss \S+ val acc (\S+) \(step 60\) tokens/s", r.stderr)[-1]
    final = json.loads((run_dir / "summary.json").read_text())["accuracy"]["val"]["all"]
    assert last == f"{final:.3f}"
    # a smoke run that did not learn says that it was not meant to
    acc = json.loads((run_dir / "summary.json").read_text())["test_accuracy"]
    assert ("smoke scale: not meant to learn" in log) == (acc < 0.9)


def test_the_last_progress_line_shows_the_evaluation_after_the_last_log_row(caplog):
    """Training logs a row, then evaluates at the same step: the line written at the end
    carries that evaluation's accuracy, not the previous one's."""
    from study.train.progress import Progress
    bar = Progress(total=10, initial=0, task="counting", model="gru", every_s=1e9)
    bar.show(10, loss=0.05, acc={"val": 0.0}, tokens_per_s=100.0)
    bar.evaluated({"val": 1.0, "test": 0.5}, step=10)
    with caplog.at_level(logging.INFO, logger="study.train.progress"):
        bar.close()
    assert "step 10/10 loss 0.0500 val acc 1.000 (step 10) tokens/s" in caplog.text


def test_the_progress_line_names_the_accuracy_and_the_step_it_was_measured_at(caplog):
    """A low accuracy beside a low loss is an evaluation made before the network learned: the
    line says which split's accuracy it is and at which step it was measured."""
    from study.train.progress import Progress
    bar = Progress(total=200, initial=0, task="counting", model="gru", every_s=1e-9)
    bar.show(20, loss=0.9, acc={}, tokens_per_s=100.0)
    bar.evaluated({"val": 0.0, "test": 0.0}, step=20)
    with caplog.at_level(logging.INFO, logger="study.train.progress"):
        bar.show(150, loss=0.0513, acc={"val": 0.0, "test": 0.0}, tokens_per_s=100.0)
    assert "loss 0.0513 val acc 0.000 (step 20)" in caplog.text


@pytest.mark.slow  # a subprocess run
def test_no_progress_lines_when_asked_for_none(tmp_path):
    r = run_cli(*ARGS, "train.progress_seconds=0", f"run_dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert not LINE.search(r.stderr)


def _untimed(log: str) -> list[str]:
    return [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", line) for line in log.splitlines()]


def test_run_log_of_an_in_process_run_keeps_every_session_and_times_each_stage(tmp_path,
                                                                               monkeypatch):
    """A run started in this process keeps what it says in run.log, each line stamped; a
    second session on the same directory (here: adding an analysis) appends to it. Each
    stage ends with its wall time there, and each session with their sum; the terminal shows
    what it showed before (no stage times)."""
    run_dir = tmp_path / "r"
    fake = io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main([*ARGS, f"run_dir={run_dir}"]) == 0
    assert main([*ARGS[:-1], "analyses=probes", f"run_dir={run_dir}"]) == 0
    log = (run_dir / "run.log").read_text()
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S", line) for line in log.splitlines()
               if not line.startswith((" ", "Traceback"))), log
    lines = _untimed(log)
    assert sum(" × gru seed 0 on " in line for line in lines) == 2
    assert "training from step 0 to 60 on cpu, fp32" in lines
    assert any("already finished" in line for line in lines)
    assert any(line.startswith("analysis probes on") for line in lines)
    times = [line for line in lines if line.startswith("time: ")]
    ends = [i for i, t in enumerate(times) if t.startswith("time: total ")]
    assert len(ends) == 2, times
    first, second = times[:ends[0] + 1], times[ends[0] + 1:]
    for stage in ("data", "training", "report"):
        assert any(re.fullmatch(rf"time: {stage} \d.*", t) for t in first), times
    assert re.fullmatch(r"time: total .* \(data .*, training .*, report .*\)", first[-1]), times
    # the second session trains nothing and times the analysis it adds
    assert not any(t.startswith("time: training") for t in second), times
    assert any(re.fullmatch(r"time: analysis probes \d.*", t) for t in second), times
    assert re.fullmatch(r"time: total .* \(data .*, analysis probes .*, report .*\)", second[-1]), times
    shown = fake.getvalue()
    assert "time: " not in shown  # stage times are for the log
    assert all(line in shown for line in lines
               if not line.startswith("time: ") and ": running for " not in line)


def test_a_log_that_is_stderr_gets_each_line_once(tmp_path, monkeypatch):
    """A launcher that sends a run's stderr to its run.log gets each line once, stamped."""
    path = tmp_path / "run.log"
    log = logging.getLogger("study.test")
    with open(path, "a") as f:
        monkeypatch.setattr(sys, "stderr", f)
        with runlog.kept(path):
            log.info("once")
        log.info("after the run")  # the terminal handler is back
    assert _untimed(path.read_text()) == ["once", "after the run"]
    assert path.read_text().splitlines()[0] != "once"


def test_a_long_stage_leaves_a_line_at_least_every_interval_and_its_time(tmp_path, monkeypatch):
    """A silent stage gets a heartbeat line in run.log; a tqdm bar that draws nothing (stderr
    is no terminal) still logs its count; each stage's time and the session's sum end it."""
    monkeypatch.setattr(progress, "EVERY_S", 0.2)
    path, log = tmp_path / "run.log", logging.getLogger("study.test")
    with runlog.kept(path), progress.stage_times(log):
        with progress.timed("quiet stage", log):
            time.sleep(1.0)
        with progress.timed("bar stage", log):
            for _ in progress.tqdm(range(8), desc="das", unit="alignment", disable=True):
                time.sleep(0.1)
    lines = _untimed(path.read_text())
    beats = [line for line in lines if line.startswith("quiet stage: running for ")]
    assert len(beats) >= 3, lines
    counts = [line for line in lines if re.fullmatch(r"das \d/8 alignment \(\d+%\), .*", line)]
    assert len(counts) >= 2, lines
    assert re.fullmatch(r"time: quiet stage 1\.\d s", lines[lines.index(beats[-1]) + 1]), lines
    assert any(re.fullmatch(r"time: bar stage 0\.\d s", line) for line in lines), lines
    assert re.fullmatch(r"time: total 1\.\d s \(quiet stage 1\.\d s, bar stage 0\.\d s\)", lines[-1])


def test_a_bar_that_logged_a_count_logs_its_last_one_when_it_closes(tmp_path, monkeypatch):
    """A bar whose last updates come in a burst (DAS counts an alignment when its training
    ends) must not leave the log on an earlier count and its ETA: it closes on what was
    done, without an ETA. A bar that never logged stays silent."""
    monkeypatch.setattr(progress, "EVERY_S", 0.2)
    path, log = tmp_path / "run.log", logging.getLogger("study.test")
    with runlog.kept(path):
        bar = progress.tqdm(total=3, desc="das", unit="alignment", disable=True)
        time.sleep(0.3)
        bar.update(1)  # logged: 1/3 and an ETA
        bar.update(2)  # within the interval: not logged
        bar.close()
        quick = progress.tqdm(total=3, desc="quick", unit="alignment", disable=True)
        quick.update(3)
        quick.close()
    counts = [line for line in _untimed(path.read_text()) if line.startswith(("das ", "quick "))]
    assert len(counts) == 2 and re.fullmatch(r"das 1/3 alignment \(33%\), 0\.\d s, ETA .*",
                                             counts[0]), counts
    assert re.fullmatch(r"das 3/3 alignment \(100%\), 0\.\d s", counts[1]), counts


def test_library_lines_can_be_silenced_and_routed_with_the_logging_api(tmp_path, capsys):
    """A program using the library routes its lines with a handler of its own and silences
    them with the standard calls; nothing then reaches stderr either."""
    from study.core.damage import set_aside_damaged

    got: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = got.append
    root = logging.getLogger("study")
    level = root.level
    root.addHandler(handler)

    def damaged(name):  # a damaged table: the library says it set it aside
        (tmp_path / name).write_bytes(b"not parquet")
        set_aside_damaged(tmp_path)

    try:
        damaged("a.parquet")
        assert [r.name for r in got] == ["study.core.damage"] and "a.parquet" in got[0].getMessage()
        assert "a.parquet is damaged" in capsys.readouterr().err  # as the command line shows it
        root.setLevel(logging.WARNING)
        damaged("b.parquet")
        root.setLevel(level)
        logging.disable(logging.INFO)
        damaged("c.parquet")
        assert len(got) == 1 and capsys.readouterr().err == ""
    finally:
        logging.disable(logging.NOTSET)
        root.setLevel(level)
        root.removeHandler(handler)
