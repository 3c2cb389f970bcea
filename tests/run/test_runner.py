"""`study run` end to end at smoke scale: the run directory layout, and a re-run that skips."""
import json

import pytest

from study.cli import main
from tests.conftest import run_cli


def test_run_writes_the_layout_and_a_rerun_skips(tmp_path, monkeypatch, capsys):
    """The first run is `python -m study run` in a process of its own; the re-run, the same
    command in this one."""
    run_dir = tmp_path / "r"
    args = ("run", "task=counting", "model=gru", "scale=smoke", "analyses=probes", f"run_dir={run_dir}")
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-2:] == [str(run_dir), f"report: {run_dir / 'report.html'}"]
    for name in ("config.json", "env.json", "status.json", "metrics.parquet", "summary.json",
                 "heuristics.parquet", "report.html", "run.log"):
        assert (run_dir / name).exists(), name
    assert json.loads((run_dir / "status.json").read_text())["status"] == "done"
    assert json.loads((run_dir / "config.json").read_text())["task"] == "counting"
    assert any((run_dir / "analyses" / "probes").glob("*.parquet"))
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()
              and p.name not in ("status.json", "env.json", "config.json", "report.html",
                                 "run.log", "times.json")}  # both gain the session's lines

    monkeypatch.chdir(tmp_path)
    assert main(list(args)) == 0
    again = capsys.readouterr().err
    assert "already finished" in again
    assert "analysis probes" not in again  # finished analyses are not recomputed
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}  # weights, metrics, tables untouched


def test_a_run_dir_holding_another_config_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["run", "task=counting", "model=gru", "scale=smoke", "analyses=none",
                 f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    assert main(["run", "task=counting", "model=lstm", "scale=smoke", f"run_dir={run_dir}"]) == 2
    assert "different config" in capsys.readouterr().err
    assert json.loads((run_dir / "config.json").read_text())["model"] == "gru"


@pytest.mark.slow  # three subprocess runs
def test_an_analysis_asked_with_other_settings_runs_again_and_keeps_the_old_tables(tmp_path):
    from study.run import runstate
    from study.core.rundir import RunDir

    run_dir = tmp_path / "r"
    args = ("run", "task=counting", "model=gru", "scale=smoke", "analyses=probes",
            f"run_dir={run_dir}")
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    probes = run_dir / "analyses" / "probes"
    first = json.loads((probes / "settings.json").read_text())
    weights = {p: p.stat().st_mtime_ns for p in (run_dir / "checkpoints").rglob("*") if p.is_file()}
    asked = {"probes": {**first, "n_examples": first["n_examples"] + 16}}
    assert runstate.complete(run_dir, {"probes": first})  # same settings: finished
    assert not runstate.complete(run_dir, asked)  # other settings: not this analysis's tables
    assert runstate.complete(run_dir, ("probes",))  # names alone: any tables will do

    again = run_cli(*args, f"probes.n_examples={first['n_examples'] + 16}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"n_examples: {first['n_examples']} -> {first['n_examples'] + 16}" in again.stderr
    assert "analysis probes" in again.stderr  # recomputed, not skipped
    assert json.loads((probes / "settings.json").read_text()) == asked["probes"]
    old = run_dir / "superseded" / "probes-1"
    assert json.loads((old / "settings.json").read_text()) == first and any(old.glob("*.parquet"))
    assert runstate.complete(run_dir, asked) and RunDir(run_dir).status() == "done"
    assert weights == {p: p.stat().st_mtime_ns for p in weights}  # nothing retrained


def test_runtime_only_settings_never_make_tables_stale(tmp_path):
    """`runtime.eval_batch_size`, `runtime.batch_restarts` and `runtime.batch_kinds` change
    speed, not results: a run asked with other values of them is finished, a record that
    still holds them (tables written before they were declared runtime-only) is not stale,
    and a setting that decides results still is."""
    from study.run import runstate
    from study.run.config import resolve
    from study.core.rundir import RunDir

    base = {"task": "counting", "model": "gru", "scale": "smoke", "analyses": "das"}
    asked = resolve(base).analysis_settings()["das"]
    fast = resolve({**base, "runtime.eval_batch_size": "7", "runtime.batch_restarts": "false",
                    "runtime.batch_kinds": "on"})
    assert fast.analysis_settings()["das"] == asked
    assert not {"eval_batch_size", "batch_restarts", "batch_kinds"} & set(asked)
    other_k = resolve({**base, "das.k": "1,2"}).analysis_settings()["das"]

    rd = RunDir(tmp_path / "r")
    (rd.analysis_dir("das")).mkdir(parents=True)
    rd.write_json("analyses/das/settings.json", {**asked, "eval_batch_size": 1000,
                                                  "batch_restarts": True})
    assert runstate.settings_change(rd, "das", asked) is None
    assert runstate.settings_change(rd, "das", other_k) == "k: [2] -> [1, 2]"
    rd.write_json("analyses/das/settings.json", {k: v for k, v in asked.items() if k != "seed"})
    assert runstate.settings_change(rd, "das", asked) == "seed: (unset) -> 0"
