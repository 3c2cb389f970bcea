"""Run directories you can trust: `run_dir=` and `force=true` never touch folders that are not
runs, settings that differ from the weights are refused, damaged files are one line (or set
aside and rebuilt), atomic writes leave no temp files, and a full disk is one line. The
commands run in this process (`study.cli.main`, what `python -m study` calls); the one-line
errors of a separate process are checked in tests/test_cli.py."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from study.cli import main
from study.core.rundir import RunDir, atomic_write_bytes

SMOKE = ("task=counting", "model=gru", "scale=smoke")
TRAIN = (*SMOKE, "analyses=none")  # training alone: no analysis slows these
# das and probes, das on one variable with one restart and no controls: its tables and
# alignments in seconds
DAS = ("das.variables=up_down:count", "das.restarts=1", "das.controls=false")
ANALYSED = (*SMOKE, "analyses=das,probes", *DAS)


@pytest.fixture
def cli(capsys):
    """`cli(*args)`: `study ARGS` run here; its exit code, stdout and stderr."""
    from tests.conftest import cli_here
    return cli_here(capsys)


def one_line_exit_2(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished smoke run with das and probes tables (copied by each test that alters it)."""
    run_dir = tmp_path_factory.mktemp("finished") / "r"
    assert main(["run", *ANALYSED, f"run_dir={run_dir}"]) == 0
    return run_dir


@pytest.fixture
def run_copy(finished, tmp_path):
    dst = tmp_path / "r"
    shutil.copytree(finished, dst)
    return dst


# --- case 1: force on a folder that is not a run ---------------------------------------------

@pytest.mark.parametrize("files", [{"config.json": '{"lr": 0.1}', "data.csv": "a,b\n1,2\n"},
                                   {"config.json": '{"lr": 0.1}'}])
def test_force_on_a_folder_that_is_not_a_run_is_refused_and_deletes_nothing(cli, tmp_path,
                                                                             monkeypatch, files):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    r = cli("run", *TRAIN, "force=true", f"run_dir={folder}")
    one_line_exit_2(r, str(folder))
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    for name, text in files.items():
        assert (folder / name).read_text() == text


def test_force_clears_only_what_the_run_wrote(cli, run_copy):
    (run_copy / "notes.txt").write_text("mine")
    r = cli("run", *TRAIN, "force=true", f"run_dir={run_copy}")
    assert r.returncode == 0, r.stderr
    assert (run_copy / "notes.txt").read_text() == "mine"
    assert not (run_copy / "analyses").exists()  # this run asked for no analyses
    assert (run_copy / ".study-run").exists() and (run_copy / "checkpoints").is_dir()


def test_force_with_other_settings_over_symlinked_checkpoints_changes_nothing(cli, run_copy,
                                                                              tmp_path):
    """Clearing never follows a symlink, so the old weights would stay: refused before the
    new config.json is written (a report would otherwise title seed-0 weights "seed 1")."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run_copy / "checkpoints", elsewhere)
    (run_copy / "checkpoints").symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in run_copy.iterdir() if p.is_file()}
    r = cli("run", *ANALYSED, "seed=1", "force=true", f"run_dir={run_copy}")
    one_line_exit_2(r, f"force=true cannot clear {run_copy / 'checkpoints'}", "symlink")
    assert {p.name: p.read_bytes() for p in run_copy.iterdir() if p.is_file()} == before
    assert json.loads((run_copy / "config.json").read_text())["seed"] == 0


# --- case 2: places a run may not go ---------------------------------------------------------

def test_root_home_and_cwd_are_refused(cli, tmp_path, monkeypatch):
    from study.core.errors import UsageError
    from study.core.placement import check
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    # `/` is checked in-process: a regression must fail this test, not write into `/`
    for run_dir, needle in (("/", "root directory"), (str(home), "home directory"),
                            (".", "current directory"), (str(tmp_path), "current directory")):
        with pytest.raises(UsageError, match=needle):
            check(run_dir)
    for run_dir, needle in ((str(home), "home directory"), (".", "current directory")):
        one_line_exit_2(cli("run", *TRAIN, f"run_dir={run_dir}"), needle)
    assert list(home.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["home"]


def test_bad_run_dirs_are_one_line_before_anything_is_written(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "thesis.tex").write_text("x")
    cases = [(tmp_path / "afile", "existing file"), (tmp_path / ("n" * 5000), "too long"),
             (tmp_path / "full", "not a run directory")]
    for run_dir, needle in cases:
        one_line_exit_2(cli("run", *TRAIN, f"run_dir={run_dir}"), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "full"]
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["thesis.tex"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_an_unwritable_folder_is_one_line(cli, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    one_line_exit_2(cli("run", *TRAIN, f"run_dir={locked / 'r'}"), "cannot write")


# --- case 5: settings that the weights were not trained with ---------------------------------

@pytest.mark.parametrize("also_drop_marker", [False, True])
def test_a_run_whose_config_json_is_gone_refuses_other_settings(cli, run_copy, also_drop_marker):
    (run_copy / "config.json").unlink()
    if also_drop_marker:  # a run made before markers: the checkpoint meta says what it was
        (run_copy / ".study-run").unlink()
    r = cli("run", *TRAIN, "seed=1", f"run_dir={run_copy}")
    one_line_exit_2(r, "another config" if not also_drop_marker else "seed", "config.json is gone")
    assert not (run_copy / "config.json").exists()
    same = cli("run", *ANALYSED, f"run_dir={run_copy}")
    assert same.returncode == 0 and "already finished" in same.stderr, same.stderr
    assert json.loads((run_copy / "config.json").read_text())["seed"] == 0


# --- cases 9/10: damaged JSON files ----------------------------------------------------------

@pytest.mark.parametrize("text", ['{"task": "counting", "mod', "[1, 2]", '{"task": "counting"}'])
def test_a_damaged_config_json_is_one_line_naming_it(cli, run_copy, text):
    (run_copy / "config.json").write_text(text)
    one_line_exit_2(cli("run", *TRAIN, f"run_dir={run_copy}"), "config.json")
    one_line_exit_2(cli("analyze", str(run_copy), "analysis=probes"), "config.json")


def test_a_damaged_meta_json_is_one_line_naming_it(cli, run_copy):
    ckpt = sorted((run_copy / "checkpoints").glob("step_*"))[-1]
    (ckpt / "meta.json").write_text("[]")
    one_line_exit_2(cli("analyze", str(run_copy), "analysis=probes"), "meta.json")
    (ckpt / "meta.json").write_text('{"step": 3}')
    one_line_exit_2(cli("analyze", str(run_copy), "analysis=probes"), "meta.json", "missing")


def test_damaged_status_and_summary_json_are_recovered_from_the_checkpoints(cli, run_copy):
    (run_copy / "status.json").write_text("[1]")
    r = cli("run", *ANALYSED, f"run_dir={run_copy}")
    assert r.returncode == 0, r.stderr
    assert "status.json was damaged" in r.stderr and "Traceback" not in r.stderr
    assert RunDir(run_copy).status() == "done"
    summary = json.loads((run_copy / "summary.json").read_text())
    (run_copy / "summary.json").write_text('{"test_acc')
    one_line_exit_2(cli("report", str(run_copy), f"out={run_copy.parent / 'rep'}"), "summary.json")
    r = cli("run", *ANALYSED, f"run_dir={run_copy}")
    assert r.returncode == 0, r.stderr
    assert json.loads((run_copy / "summary.json").read_text()) == summary


# --- case 11: damaged tables are set aside and rebuilt ---------------------------------------

def _truncate(path: Path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_das_table_and_alignments_are_set_aside_and_recomputed(cli, run_copy):
    das = run_copy / "analyses" / "das"
    _truncate(das / "das.parquet")
    _truncate(das / "alignments.safetensors")
    report = cli("report", str(run_copy), f"out={run_copy.parent / 'rep'}")
    one_line_exit_2(report, "analyze", "analysis=das")
    r = cli("analyze", str(run_copy), "analysis=das", *DAS)
    assert r.returncode == 0, r.stderr
    assert (das / "das.parquet.damaged").exists() and (das / "alignments.safetensors.damaged").exists()
    import pandas as pd
    from safetensors import safe_open
    assert len(pd.read_parquet(das / "das.parquet")) > 0
    with safe_open(str(das / "alignments.safetensors"), framework="numpy") as f:
        assert list(f.keys())


def test_a_rerun_rebuilds_damaged_tables_and_removes_stale_temps(cli, run_copy):
    _truncate(run_copy / "analyses" / "probes" / "probes.parquet")
    _truncate(run_copy / "heuristics.parquet")
    stale = run_copy / ".status.json.abc123.tmp"
    stale.write_text("{")
    r = cli("run", *ANALYSED, f"run_dir={run_copy}")
    assert r.returncode == 0, r.stderr
    assert "analysis probes" in r.stderr and "analysis das" not in r.stderr
    assert not stale.exists()
    import pandas as pd
    assert len(pd.read_parquet(run_copy / "analyses" / "probes" / "probes.parquet")) > 0
    assert len(pd.read_parquet(run_copy / "heuristics.parquet")) > 0
    assert (run_copy / "heuristics.parquet.damaged").exists()


def test_the_advice_for_a_damaged_metrics_table_names_training(cli, run_copy):
    _truncate(run_copy / "metrics.parquet")
    r = cli("report", str(run_copy), f"out={run_copy.parent / 'rep'}")
    one_line_exit_2(r, "metrics.parquet", "written by training")


# --- case 12: atomic writes and a full disk --------------------------------------------------

def test_a_failing_atomic_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def boom(*a):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_bytes(tmp_path / "status.json", b"{}")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({r.stderr.strip() or 'not permitted'})")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_full_disk_is_one_line_naming_the_file(cli, tiny_disk):
    run_dir = tiny_disk / "r"
    r = cli("run", *TRAIN, f"run_dir={run_dir}")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no space left on device writing " + str(run_dir)), r.stderr
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp") or ".tmp-" in p.name]
    assert not (run_dir / ".study-claim").exists()


# --- case 13: the dataset cache --------------------------------------------------------------

def test_a_cache_file_swapped_for_another_split_is_regenerated(tmp_path, monkeypatch, capsys):
    import numpy as np

    from study.core.registry import get
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path))
    entry = get("task", "counting")
    task = entry.obj(entry.make_config("smoke"))
    test = task.split("test")
    val = task.split("val")
    files = {p.name.rsplit("-", 1)[1]: p for p in (tmp_path / "datasets").glob("*.npz")}
    shutil.copy(files["val.npz"], files["test.npz"])  # another split's valid file
    again = entry.obj(entry.make_config("smoke")).split("test")
    assert "regenerating dataset cache" in capsys.readouterr().err
    assert np.array_equal(again.ids, test.ids) and not np.array_equal(again.ids[: len(val)], val.ids)
    reread = entry.obj(entry.make_config("smoke")).split("test")  # the regenerated file is trusted
    assert np.array_equal(reread.ids, test.ids) and capsys.readouterr().err == ""


def test_disk_full_errors_name_the_file(tmp_path, monkeypatch):
    import errno

    from study.core import diskfull
    err = diskfull.disk_full(OSError(errno.ENOSPC, "No space left", str(tmp_path / "a.json")), tmp_path)
    assert f"writing {tmp_path / 'a.json'}" in str(err)

    def torch_like_writer(f):  # torch's zip writer names no file in its error
        raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed "
                           "writing file data/0: file write failed")
    monkeypatch.setattr(diskfull.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 0))
    with pytest.raises(Exception) as info:
        with diskfull.reporting_disk_full(tmp_path):
            torch_like_writer(tmp_path / "checkpoints" / "state.pt")
    assert str(info.value) == (f"no space left on device writing {tmp_path / 'checkpoints' / 'state.pt'}; "
                               "free some space and re-run the same command to resume")
    with pytest.raises(ValueError):  # anything else passes through untouched
        with diskfull.reporting_disk_full(tmp_path):
            raise ValueError("x")
