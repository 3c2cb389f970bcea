"""The command-line contract: help, list, describe, sample, and one-line errors with exit 2."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli


def test_help_lists_every_command():
    r = run_cli("--help")
    assert r.returncode == 0
    for command in ("list", "describe", "sample", "run", "sweep", "analyze", "bench"):
        assert command in r.stdout


def test_list_shows_every_registry_entry_without_importing_torch():
    code = ("import sys; from study.cli import main; rc = main(['list']); "
            "assert 'torch' not in sys.modules and 'pyvene' not in sys.modules, 'heavy import'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    for name in ("binding", "assign_add", "counting", "gpt12", "rope2", "attn2", "gru", "lstm"):
        assert name in r.stdout
    assert "37.8" in r.stdout  # gpt12's parameter count (millions) on the binding vocabulary


@pytest.mark.parametrize("what", ["task=binding", "model=gpt12", "task=counting", "model=lstm"])
def test_describe_prints_fields_with_types_and_defaults(what):
    r = run_cli("describe", what)
    assert r.returncode == 0, r.stderr
    kind = what.split("=")[0]
    assert f"{kind}.seed" in r.stdout or f"{kind}." in r.stdout
    assert "=" in r.stdout


@pytest.mark.parametrize("task,strata", [
    ("binding", {"depth"}),
    ("assign_add", {"n_vars", "pair_held_out", "position_restricted"}),
    ("counting", {"count", "variant"}),
])
def test_sample_prints_json_lines(task, strata):
    r = run_cli("sample", f"task={task}", "n=4", "split=test")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 4
    for row in rows:
        assert {"text", "label", "split"} | strata <= set(row)
        assert row["split"] == "test"


def test_sample_binding_text_is_the_program_format():
    r = run_cli("sample", "task=binding", "n=1", "scale=smoke")
    row = json.loads(r.stdout)
    lines = row["text"].split("\n")
    assert lines[-1].startswith("#") and lines[-1].endswith(":")
    assert all(len(line) == 3 and line[1] == "=" for line in lines[:-1])


@pytest.mark.parametrize("args,needle", [
    (["run", "task=nope", "model=gru"], "known tasks: "),
    (["run", "task=binding", "model=nope"], "known models: "),
    (["run", "task=binding", "model=gru", "train.lr=fast"], "train.lr='fast': expected float"),
    (["run", "task=binding", "model=gru", "train.nope=1"], "unknown key 'train.nope'"),
    (["run", "task=binding", "model=gru", "scale=huge"], "choose from paper, small, smoke"),
    (["run", "task=binding", "model=gru", "bogus=1"], "unknown key 'bogus'"),
    (["run", "task=counting", "model=gru", "task.variant=foo"], "task.variant"),
    (["run", "task=binding"], "model= is required"),
    (["run", "task=binding", "model=gru", "oops"], "not of the form key=value"),
    (["sample", "task=binding", "split=nope"], "choose from"),
    (["sample", "task=binding", "n=zero"], "n='zero'"),
    (["describe"], "exactly one of"),
    (["frobnicate"], "unknown command"),
    (["analyze", "/nonexistent/run", "analysis=das"], "not a run directory"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needle):
    run_dir = tmp_path / "run"
    if args[0] == "run":
        args = [*args, f"run_dir={run_dir}"]
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr
    assert not run_dir.exists()
    assert not (tmp_path / "runs").exists()


def test_analysis_the_architecture_cannot_support_is_refused_at_parse_time(tmp_path):
    r = run_cli("run", "task=counting", "model=gru", "analyses=circuits", f"run_dir={tmp_path / 'r'}")
    assert r.returncode == 2
    assert "circuits" in r.stderr and "attention" in r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("kind,model", [("train", "gru"), ("das", "gru")])
def test_bench_writes_a_table_with_the_ratio_to_the_naive_baseline(tmp_path, kind, model):
    out = tmp_path / f"{kind}.md"
    r = run_cli("bench", kind, "task=counting", f"model={model}", "scale=smoke", "steps=3", f"out={out}")
    assert r.returncode == 0, r.stderr
    table = out.read_text()
    assert ("ratio" in table or "speedup" in table) and table.count("\n|") >= 4  # header, rule, 2 rows
    assert out.with_suffix(".csv").exists()
