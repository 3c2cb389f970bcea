"""The command-line contract: help, list, describe, sample, and one-line errors with exit 2.
The tests of many cases run the command in this process (`cli`: `study.cli.main`, what
`python -m study` calls); the others start `python -m study` as a user does."""
import json
import subprocess
import sys

import pytest

from study.core import registry

from study.core.errors import UsageError
from tests.conftest import ROOT, run_cli


@pytest.fixture
def cli(capsys, tmp_path, monkeypatch):
    """`cli(*args)`: `study ARGS` run in this process in tmp_path; its exit code, stdout and
    stderr, as `run_cli` gives a process's."""
    from tests.conftest import cli_here
    monkeypatch.chdir(tmp_path)
    return cli_here(capsys)


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


@pytest.mark.parametrize("what", [f"{kind}={name}" for kind in ("task", "model", "analysis")
                                  for name in registry.builtin(kind)])
def test_describe_prints_fields_with_types_and_defaults(cli, what):
    r = cli("describe", what)
    assert r.returncode == 0, r.stderr
    kind, name = what.split("=")
    prefix = name if kind == "analysis" else kind  # an analysis's settings are NAME.FIELD
    fields = [line for line in r.stdout.splitlines() if line.startswith(f"  {prefix}.")]
    assert fields and all(" = " in line and "(" in line for line in fields), r.stdout


@pytest.mark.parametrize("task,strata", [
    ("binding", {"depth"}),
    ("assign_add", {"n_vars", "pair_held_out", "position_restricted"}),
    ("counting", {"count", "variant"}),
])
def test_sample_prints_json_lines(cli, task, strata):
    r = cli("sample", f"task={task}", "n=4", "split=test")
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
    (["describe", "task=counting", "model=gru"], "exactly one of"),
    (["frobnicate"], "unknown command"),
    (["analyze", "/nonexistent/run", "analysis=das"], "not a run directory"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli, tmp_path, args, needle):
    run_dir = tmp_path / "run"
    if args[0] == "run":
        args = [*args, f"run_dir={run_dir}"]
    r = cli(*args)
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
    from study.cli import main  # in this process: the table is what is checked
    out = tmp_path / f"{kind}.md"
    assert main(["bench", kind, "task=counting", f"model={model}", "scale=smoke", "steps=3",
                 f"out={out}"]) == 0
    table = out.read_text()
    assert ("ratio" in table or "speedup" in table) and table.count("\n|") >= 4  # header, rule, 2 rows
    assert out.with_suffix(".csv").exists()


def test_bench_train_for_every_family_gives_each_its_papers_task_and_the_peak(tmp_path, capsys):
    from study.cli import main  # in this process: the table is what is checked
    out = tmp_path / "all.md"
    assert main(["bench", "train", "model=all", "scale=smoke", "steps=2", f"out={out}"]) == 0
    import pandas as pd

    df = pd.read_csv(out.with_suffix(".csv"))
    got = sorted(set(zip(df["model"], df["task"])))
    assert got == sorted({"gpt12": "binding", "attn2": "assign_add", "rope2": "counting",
                          "gru": "counting", "lstm": "counting"}.items())
    assert sorted(df["variant"].unique()) == ["engine", "naive"] and len(df) == 10
    assert (df["peak_gflop_per_s"] > 0).all() and (df["frac_of_peak"] > 0).all()
    capsys.readouterr()
    assert main(["bench", "train", "model=all", "task=counting", f"out={tmp_path / 'x.md'}"]) == 2
    assert "drop task=" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


# --- every setting is checked when the command line is parsed ------------------------------
BAD_SETTINGS = [
    (["analyses=das", "das.k=abc"], "das.k='abc'"),
    (["analyses=das", "das.sites=bogus"], "das.sites=bogus"),
    (["analyses=das", "das.sites=resid"], "no 'resid' sites"),  # gru has state sites only
    (["analyses=das", "das.layers=1"], "state sites have one layer, 0"),
    (["model=rope2", "analyses=das", "das.layers=3"], "resid[3] does not exist"),
    (["model=rope2", "analyses=das", "das.sites=head", "das.layers=2"], "head[2] does not exist"),
    (["analyses=das", "das.bogus=1"], "unknown key 'das.bogus'; valid: das.variables"),
    (["analyses=das", "das.steps=-1"], "das.steps=-1"),
    (["analyses=das", "das.variables=bogus"], "'bogus' is not a causal variable of counting"),
    (["analyses=das", "das.variables=up_down:bogus"], "choose from up_down:count, up_down:phase"),
    (["analyses=das", "das.lr=nan"], "das.lr='nan'"),
    (["analyses=das", "das.laf_form=bogus"], "das.laf_form=bogus: choose from sd, rotated"),
    (["analyses=patching", "patching.kinds=bogus"], "not a counterfactual kind of counting"),
    (["analyses=probes", "probes.n_examples=-1"], "probes.n_examples=-1"),
    (["analyses=probes", "probes.variables=bogus"], "'bogus' is not a variable of task counting"),
    (["analyses=probes", "probes.sites=resid"], "probes.sites=resid"),
    (["analyses=patching", "das.k=1"], "analysis 'das' is not among the analyses asked for"),
    (["train.lr=nan"], "train.lr='nan'"),
    (["train.lr=inf"], "train.lr='inf'"),
    (["train.lr=0"], "train.lr=0.0: must be a finite number > 0"),
    (["train.weight_decay=-1"], "train.weight_decay=-1.0: must be a finite number >= 0"),
    (["train.betas=2,2"], "train.betas=2.0,2.0: two numbers, each in [0, 1)"),
    (["train.grad_clip=nan"], "train.grad_clip='nan'"),
    (["train.max_minutes=nan"], "train.max_minutes='nan'"),
    (["seed=-5"], "seed='-5': expected a whole number in 0..4294967295"),
    (["seed=1e99"], "seed='1e99': expected a whole number in 0..4294967295"),
    (["model.d_hidden=1e9"], "model.d_hidden: 1000000000 given; an integer in 1..65536"),
]


@pytest.mark.parametrize("extra,needle", BAD_SETTINGS, ids=[" ".join(a) for a, _ in BAD_SETTINGS])
def test_a_bad_setting_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys,
                                                             extra, needle):
    from study.cli import main
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    model = [a for a in extra if a.startswith("model=")] or ["model=gru"]
    rest = [a for a in extra if not a.startswith("model=")]
    rc = main(["run", "task=counting", *model, "scale=smoke", f"run_dir={run_dir}", *rest])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err
    assert not run_dir.exists() and not (tmp_path / "runs").exists()


def test_a_bad_analysis_setting_fails_before_training_not_after(tmp_path):
    run_dir = tmp_path / "run"
    r = run_cli("run", "task=counting", "model=gru", "analyses=das", "das.k=abc",
                f"run_dir={run_dir}", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: das.k='abc': expected comma-separated ints"
    assert not run_dir.exists()


def _run_dir_with_config(tmp_path, *args):
    """A run directory holding only config.json, as `run` writes it (no training needed)."""
    from study.run.config import resolve
    from study.core.settings import split_args
    from study.core.rundir import RunDir
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    cfg = resolve(split_args(["task=counting", "model=gru", "scale=smoke", *args]))
    rd.write_json("config.json", cfg.to_dict())
    return rd, cfg


@pytest.mark.parametrize("extra,needle", [
    (["das.k=abc"], "das.k='abc'"),
    (["das.variables=bogus"], "'bogus' is not a causal variable"),
    (["probes.n_examples=9"], "analysis 'probes' is not among the analyses asked for"),
    (["checkpoint=5"], "checkpoint=5 is not a checkpoint of"),
    (["checkpoint=last"], "checkpoint='last': give final, all, a step"),
    (["checkpoint=all"], "has no checkpoints to analyse"),
])
def test_analyze_checks_settings_before_loading_a_checkpoint(tmp_path, capsys, extra, needle):
    from study.cli import main
    rd, _ = _run_dir_with_config(tmp_path)
    rc = main(["analyze", str(rd.path), "analysis=das", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not (rd.path / "analyses").exists()


def test_config_json_round_trips_with_the_analysis_configs(tmp_path):
    from study.run.config import from_dict
    rd, cfg = _run_dir_with_config(tmp_path, "analyses=das,probes", "das.k=1,2",
                                   "probes.variables=up_down:count", "train.lr=3e-3")
    back = from_dict(rd.config())
    assert back.analysis_configs == cfg.analysis_configs
    assert back.analysis_configs["das"].k == (1, 2)
    assert back.analysis_configs["probes"].variables == ("up_down:count",)
    assert back.identity() == cfg.identity() and back.hash8() == cfg.hash8()


def test_a_config_json_with_an_unknown_field_is_one_clear_line(tmp_path):
    from study.run.config import from_dict
    rd, _ = _run_dir_with_config(tmp_path)
    old = rd.config()
    old["train"]["momentum"] = 0.9
    with pytest.raises(UsageError, match=r"config.json train: TrainConfig has no field\(s\) momentum"):
        from_dict(old)


@pytest.mark.parametrize("what,line,help_text", [
    ("analysis=das", "das.k (comma-separated ints) = (1, 2, 4, 16, 32)", "[paper]"),
    ("train=counting", "train.lr (float) = 0.0001  [paper: 0.0001", "peak learning rate"),
    ("model=rope2", "model.n_layers (int) = 2", "transformer layers"),  # help of the base field
    ("task=counting", "task.variant (str) = 'multi_object'", "multi_object | single_object"),
])
def test_describe_prints_type_default_presets_and_declared_help(cli, what, line, help_text):
    r = cli("describe", what)
    assert r.returncode == 0, r.stderr
    assert line in r.stdout
    lines = r.stdout.splitlines()
    i = next(i for i, text in enumerate(lines) if line in text)
    assert help_text in lines[i + 1]


@pytest.mark.parametrize("scale, letters, hops", [("paper", 26, 13), ("small", 5, 5)])
def test_describe_help_quotes_the_values_of_the_scale_shown(capsys, scale, letters, hops):
    from study.cli import main
    assert main(["describe", "task=binding", f"scale={scale}"]) == 0
    out = capsys.readouterr().out
    assert f"of the {letters} x 10 (query letter, answer) combinations" in out
    assert f"chains of 1-{hops} hops" in out
    assert "{" not in out


@pytest.mark.parametrize("args, said", [
    (["run", "task=bindng", "model=gru"], "unknown task 'bindng' (did you mean binding?)"),
    (["run", "task=binding", "model=lstmm"], "unknown model 'lstmm' (did you mean lstm?)"),
    (["run", "task=binding", "model=gru", "analyses=dass"],
     "unknown analysis 'dass' (did you mean das?)"),
    (["describe", "task=countng"], "unknown task 'countng' (did you mean counting?)"),
])
def test_a_misspelt_name_gets_a_did_you_mean(capsys, args, said):
    from study.cli import main
    assert main(args) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


@pytest.mark.parametrize("command,line,field", [
    (["run"], "long=no", None),
    (["run", "task=counting", "model=gru", "scale=smoke"], "scale=paper",
     "train.steps (int) = 20  [paper: 50000; small: 2000; smoke: 20]"),
    (["run", "task=counting", "model=gru"], "run_dir=", "train.steps (int) = 50000"),
    (["sample", "task=counting"], "scale=smoke", "task.n_train (int) = 64"),
    (["analyze"], "checkpoint=final", None),
    (["sweep"], "dry_run=false", "slurm.time (int) = 60"),
    (["status"], "status SWEEP_DIR", None),
    (["report"], "markdown=true", None),
    (["compare"], "out=", "compare.site (comma-separated strs) = ('best',)"),
    (["describe"], "scale=paper", None),
    (["doctor"], "seconds=10", None),
    (["gpu-check"], "device=cuda", None),
    (["bench"], "steps=30", None),
    (["list"], "usage: list", None),
])
def test_each_command_has_its_own_help(cli, command, line, field):
    """`COMMAND --help` prints that command's forms, its keys with their defaults (fields at the
    scale the command would use where task= and model= are given) and one example, not the
    global usage."""
    r = cli(*command, "--help")
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert r.stdout.startswith(f"usage: {command[0]}") and "commands:" not in r.stdout
    assert line in r.stdout
    assert f"example:\n  python -m study {command[0]}" in r.stdout
    if field is not None:
        assert field in r.stdout


def test_describe_shows_values_at_the_scale_a_run_would_use():
    """The default scale is paper: describe shows paper's values unless scale= says another."""
    r = run_cli("describe", "task=counting")
    assert "train.steps (int) = 50000  [paper: 50000" in r.stdout and "scale=paper" in r.stdout
    r = run_cli("describe", "task=counting", "scale=smoke")
    assert "train.steps (int) = 20  [paper: 50000" in r.stdout


@pytest.mark.parametrize("command,wrong,right", [
    (["run", "task=counting", "model=gru"], "analysis=das", "analyses="),
    (["run", "task=counting", "model=gru"], "sead=1", "seed="),
    (["analyze", "runs/none"], "analyses=das", "analysis="),
])
def test_a_near_miss_key_is_refused_with_the_right_spelling(cli, command, wrong, right):
    r = cli(*command, wrong)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"did you mean {right}?" in r.stderr


def test_runs_list_of_valid_keys_includes_long():
    r = run_cli("run", "task=counting", "model=gru", "bogus=1")
    assert r.returncode == 2 and "long" in r.stderr.split("valid keys:")[1]


def test_running_md_lists_every_command_with_every_key_its_help_names():
    """docs/running.md's command list has a line for each command, and each plain key the
    command's --help names appears as `key=` on one of that command's lines."""
    import re

    from study.cli import COMMANDS
    from study.usage import HELP
    assert set(HELP) == set(COMMANDS)
    text = (ROOT / "docs" / "running.md").read_text()
    block = text.split("## Command line", 1)[1].split("```")[1]
    missing = []
    for command, h in HELP.items():
        lines = [line for line in block.splitlines()
                 if re.match(rf"python -m study {re.escape(command)}(\s|$)", line)]
        if not lines:
            missing.append(command)
        keys = [part for key, _, _ in h.keys for part in key.split(", ")
                if re.fullmatch(r"[a-z_]+", part)]
        missing += [f"{command} {k}=" for k in keys if not any(f"{k}=" in line for line in lines)]
    assert not missing, f"docs/running.md lacks: {', '.join(missing)}"
