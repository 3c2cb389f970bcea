"""`results SWEEP out=DIR` replaces DIR whole and `report RUN out=DIR` writes into it, so DIR
must be absent, empty or a folder of the command's own kind: a run directory, a sweep's
folder and any other folder are refused in one line and left as they were. A sweep record
of the wrong shape and a finished run without its summary are one line too."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from study.cli import main
from tests.conftest import ROOT


def _tree(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(folder.rglob("*"))}


def _one_line(capsys, rc) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture
def sweep(trained_runs, tmp_path):
    """A finished sweep's folder (its sweep.json and report) over a copy of a trained run."""
    run = tmp_path / "run"
    shutil.copytree(trained_runs("gru"), run)
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "index.html").write_text("<html>the sweep's report</html>")
    (folder / "sweep.json").write_text(json.dumps({
        "name": "one", "argv": ["sweep", "study=examples/smoke.toml"], "cwd": str(ROOT),
        "runs": [{"path": str(run), "args": []}], "jobs": {}}))
    return folder, run


def _foreign(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "index.html").write_text("my own page")
    (folder / "report.md").write_text("my own notes")
    return folder


@pytest.mark.parametrize("which", ["run", "sweep", "foreign"])
def test_results_refuses_a_folder_that_is_no_result_folder(sweep, tmp_path, capsys, which):
    folder, run = sweep
    out = {"run": run, "sweep": folder, "foreign": _foreign(tmp_path)}[which]
    before = _tree(out)
    line = _one_line(capsys, main(["results", str(folder), f"out={out}"]))
    assert f"out={out}" in line and {"run": "a run directory", "sweep": "sweep's folder",
                                     "foreign": "not a result folder"}[which] in line
    assert _tree(out) == before


def test_results_writes_an_empty_folder_and_replaces_its_own(sweep, tmp_path):
    folder, _ = sweep
    out = tmp_path / "res"
    out.mkdir()
    assert main(["results", str(folder), f"out={out}"]) == 0
    assert (out / "manifest.json").is_file()
    assert main(["results", str(folder), f"out={out}"]) == 0  # a result folder is replaced


@pytest.mark.parametrize("which", ["run", "sweep", "foreign"])
def test_report_refuses_a_folder_that_is_no_report_folder(sweep, tmp_path, capsys, which):
    folder, run = sweep
    out = {"run": run, "sweep": folder, "foreign": _foreign(tmp_path)}[which]
    before = _tree(out)
    line = _one_line(capsys, main(["report", str(run), f"out={out}"]))
    assert f"out={out}" in line
    assert _tree(out) == before


def test_report_writes_again_into_its_own_folder(sweep, tmp_path):
    _, run = sweep
    out = tmp_path / "rep"
    assert main(["report", str(run), f"out={out}"]) == 0
    assert main(["report", str(run), f"out={out}"]) == 0
    assert main(["report", str(run)]) == 0  # the default folder, twice
    assert main(["report", str(run)]) == 0


def test_a_finished_run_without_its_summary_is_one_line(sweep, tmp_path, capsys):
    folder, run = sweep
    (run / "summary.json").unlink()
    line = _one_line(capsys, main(["results", str(folder), f"out={tmp_path / 'res'}"]))
    assert "summary.json is missing" in line
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("record", [{"runs": [{}]}, [1], {"runs": [1]},
                                    {"runs": [{"path": 3}]}, {"runs": [], "jobs": [1]}])
@pytest.mark.parametrize("command", ["results", "status"])
def test_a_sweep_record_of_the_wrong_shape_is_one_line(sweep, capsys, record, command):
    folder, _ = sweep
    (folder / "sweep.json").write_text(json.dumps(record))
    line = _one_line(capsys, main([command, str(folder)]))
    assert "sweep.json is damaged" in line


@pytest.mark.parametrize("edit, said", [
    ({"argv": None}, "argv is not a list"),
    ({"tolerances": ["bogus"]}, "tolerances is not an object"),
    ({"tolerances": {"summary": {"acc_*": "bogus"}}}, "tolerance of summary.acc_*"),
    ({"tables": [1]}, "tables is not an object"),
])
def test_reproduce_checks_the_manifest_before_rerunning_anything(tmp_path, capsys, edit, said):
    from study.sweep.result_tables import RESULTS_ROOT
    folder = tmp_path / "res"
    shutil.copytree(RESULTS_ROOT / "smoke-2026-11-28", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    line = _one_line(capsys, main(["reproduce", str(folder), f"work={tmp_path / 'work'}"]))
    assert "manifest.json is damaged" in line and said in line
    assert not (tmp_path / "work").exists()


def test_reproduce_reads_every_listed_table_before_rerunning_anything(tmp_path, capsys):
    from study.sweep.result_tables import RESULTS_ROOT
    folder = tmp_path / "res"
    shutil.copytree(RESULTS_ROOT / "smoke-2026-11-28", folder)
    (folder / "phases.csv").unlink()
    line = _one_line(capsys, main(["reproduce", str(folder), f"work={tmp_path / 'work'}"]))
    assert "phases.csv is missing" in line
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("args", [
    ["run", "task=counting", "model=gru", "scale=smoke", "run_dir={loop}"],
    ["report", "{loop}"], ["report", "{run}", "out={loop}"],
    ["analyze", "{loop}", "analysis=das"], ["compare", "{loop}", "{run}"],
    ["results", "{sweep}", "out={loop}"]])
def test_a_symlink_loop_as_a_path_is_one_line(sweep, tmp_path, capsys, args):
    folder, run = sweep
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    argv = [a.format(loop=tmp_path / "a", run=run, sweep=folder) for a in args]
    line = _one_line(capsys, main(argv))
    assert str(tmp_path / "a") in line
