"""What a command leaves unsaid is said: a sample shorter than asked, a setting with no
effect on this machine, a finished run missing its training curves or a checkpoint's
record. And every file a run writes has the usual mode, its weights too."""
from __future__ import annotations

import logging
import os
import stat

import pytest

from study.cli import main


def test_a_sample_shorter_than_asked_says_so(capsys):
    assert main(["sample", "task=counting", "n=50", "split=test"]) == 0
    out, err = capsys.readouterr()
    shown = len(out.strip().splitlines())
    assert shown < 50 and f"holds {shown} examples" in err and "n=50" in err
    assert main(["sample", "task=counting", "n=5", "split=test"]) == 0
    assert capsys.readouterr().err == ""


def test_jobs_per_gpu_without_a_gpu_is_said(caplog):
    from study.sweep.launch import slots
    with caplog.at_level(logging.INFO, logger="study"):
        slots("", "auto", 4, visible=[], per_gpu="2")
    assert any("jobs_per_gpu=2 has no effect" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="study"):
        slots("", "auto", 4, visible=[], per_gpu="auto")
    assert not any("jobs_per_gpu" in r.getMessage() for r in caplog.records)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    from study.run.config import resolve
    from study.run.runner import run
    path = tmp_path_factory.mktemp("notices") / "run"
    run(resolve({"task": "counting", "model": "gru", "scale": "smoke", "train.steps": "2",
                 "analyses": "", "run_dir": str(path)}))
    return path


def test_every_file_a_run_writes_has_the_usual_mode(finished):
    umask = os.umask(0)
    os.umask(umask)
    files = [p for p in finished.rglob("*") if p.is_file()]
    assert any(p.name == "model.safetensors" for p in files)
    modes = {str(p.relative_to(finished)): stat.S_IMODE(p.stat().st_mode) for p in files}
    assert set(modes.values()) == {0o666 & ~umask}, modes


def test_a_finished_run_missing_its_curves_or_a_meta_json_says_so(finished, tmp_path, capsys):
    import shutil

    from study.train import checkpoint as ckpt
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "metrics.parquet").unlink()
    meta = ckpt.checkpoints_dir(run) / ckpt.dir_name(1) / ckpt.META
    meta.write_text(meta.read_text()[:20])
    assert main(["run", "task=counting", "model=gru", "scale=smoke", "train.steps=2",
                 "analyses=", f"run_dir={run}"]) == 0
    err = capsys.readouterr().err
    assert "already finished" in err
    notices = [line for line in err.splitlines() if line.startswith("notice:")]
    assert any(str(run / "metrics.parquet") in n and "missing" in n for n in notices), err
    assert any(str(meta) in n for n in notices), err
