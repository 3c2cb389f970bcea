"""Damaged input ends in one line and exit 2, never a traceback: a checkpoint that lost its
meta.json, an argument holding a NUL byte, an empty path, a path through a file, a file the
system refuses to read. Output cut short by its reader ends quietly."""
from __future__ import annotations

import errno
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from study.cli import main
from study.train import checkpoint as ckpt
from tests.conftest import ROOT

RUN = {"task": "counting", "model": "gru", "scale": "smoke", "train.steps": "2", "analyses": ""}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> pathlib.Path:
    """A finished two-step run (checkpoints at steps 0, 1 and 2; no analyses)."""
    from study.run.config import resolve
    from study.run.runner import run
    path = tmp_path_factory.mktemp("damaged") / "run"
    run(resolve({**RUN, "run_dir": str(path)}))
    return path


def _copy(finished, tmp_path) -> pathlib.Path:
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _one_line(capsys, rc, alone: bool = True) -> str:
    """The one error line (`alone`: all there is on stderr; else after what a run said)."""
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], err
    assert len(lines) == 1 or not alone, err
    return lines[-1]


@pytest.mark.parametrize("checkpoint", ["final", "all"])
def test_a_final_checkpoint_without_meta_json_is_one_line_before_any_analysis(
        finished, tmp_path, capsys, checkpoint):
    run = _copy(finished, tmp_path)
    final = run / "checkpoints" / ckpt.dir_name(2)
    (final / ckpt.META).unlink()
    line = _one_line(capsys, main(["analyze", str(run), "analysis=probes",
                                   f"checkpoint={checkpoint}"]))
    assert f"{final / ckpt.META} is missing" in line and f"delete {final}" in line
    assert not (run / "analyses").exists()  # no step was analysed before the refusal


def test_resuming_from_a_state_without_meta_json_is_one_line(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    shutil.rmtree(run / "checkpoints" / ckpt.dir_name(2))
    (run / "summary.json").unlink()
    (run / "status.json").write_text(json.dumps({"status": "interrupted"}))
    newest = run / "checkpoints" / ckpt.dir_name(1)
    assert (newest / ckpt.STATE).exists()
    (newest / ckpt.META).unlink()
    args = ["run", *(f"{k}={v}" for k, v in RUN.items()), f"run_dir={run}"]
    line = _one_line(capsys, main(args), alone=False)  # after the run's first lines
    assert f"{newest / ckpt.META} is unreadable (no such file)" in line and "force=true" in line


def test_report_and_compare_read_no_meta_json_and_finish(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    (run / "checkpoints" / ckpt.dir_name(2) / ckpt.META).unlink()
    assert main(["report", str(run), f"out={tmp_path / 'report'}"]) == 0
    assert main(["compare", str(run), str(finished), f"out={tmp_path / 'cmp'}"]) == 0
    assert "Traceback" not in capsys.readouterr().err


NUL_ARGS = [
    ["run", "task=counting", "model=gru", "scale=smoke", "run_dir={tmp}/a\0b"],
    ["analyze", "{tmp}/a\0b", "analysis=probes"],
    ["report", "{tmp}/a\0b"],
    ["report", "{run}", "out={tmp}/a\0b"],
    ["compare", "{run}", "{tmp}/a\0b"],
    ["status", "{tmp}/a\0b"],
    ["sweep", "study={tmp}/a\0b.toml"],
    ["gpu-check", "out={tmp}/a\0b", "device=cpu", "quick=true"],
    ["gpu-check", "out={tmp}/out", "work={tmp}/a\0b", "device=cpu", "quick=true"],
]


@pytest.mark.parametrize("args", NUL_ARGS, ids=[" ".join(a[:2]).replace("\0", "NUL") for a in NUL_ARGS])
def test_a_nul_byte_in_a_path_is_refused_when_the_command_line_is_read(finished, tmp_path, capsys,
                                                                       args):
    args = [a.format(tmp=tmp_path, run=finished) for a in args]
    line = _one_line(capsys, main(args))
    assert "holds a NUL byte" in line and "\\x00" in line
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("args, needle", [
    (["run", "task=counting", "model=gru", "scale=smoke", "run_dir="], "run_dir= is empty"),
    (["report", "{run}", "out="], "out= is empty"),
    (["compare", "{run}", "{run}", "out= "], "out= is empty"),
    (["gpu-check", "out=", "device=cpu"], "out= is empty"),
    (["sweep", "study="], "study= is empty"),
    (["analyze", "", "analysis=probes"], "an empty argument"),
    (["report", ""], "an empty argument"),
    (["report", "{run}", "out={file}/report"], "goes through the file"),
    (["report", "{run}", "out={file}"], "is a file, not a folder"),
    (["run", "task=counting", "model=gru", "scale=smoke", "run_dir={file}"], "is an existing file"),
])
def test_an_empty_path_or_one_through_a_file_is_one_line(finished, tmp_path, monkeypatch, capsys,
                                                         args, needle):
    monkeypatch.chdir(tmp_path)  # an empty run_dir= would otherwise mean runs/ here
    (tmp_path / "file").write_text("not a folder")
    args = [a.format(run=finished, file=tmp_path / "file") for a in args]
    assert needle in _one_line(capsys, main(args))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_file_the_system_refuses_is_one_line_naming_it(finished, monkeypatch, capsys):
    """A run directory whose files this user may not read (as a folder without permission):
    one line naming the file, not a traceback."""
    read_text = pathlib.Path.read_text

    def refused(self, *args, **kwargs):
        if self.name == "config.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", refused)
    line = _one_line(capsys, main(["report", str(finished), f"out={finished}-report"]))
    assert str(finished / "config.json") in line and "Permission denied" in line


@pytest.mark.parametrize("command", [["list"], ["describe", "model=gru"]])
def test_output_cut_short_by_its_reader_ends_quietly(command):
    """`python -m study list | head -1`: the reader is gone before the output is written; the
    command ends with the status a shell reports for SIGPIPE and says nothing."""
    proc = subprocess.Popen([sys.executable, "-m", "study", *command], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away at once
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""
