"""Studies as files: the shipped studies and a user's own TOML file run through `sweep study=`,
`dry_run=true` lists runs, directories and state and writes nothing, `status` reads where the
runs of a sweep stand, and a bad file is refused in one line."""
from __future__ import annotations

import json

import pytest

from study.sweep import studies
from study.core.errors import UsageError
from study.sweep.plan import parse
from tests.conftest import run_cli

OWN = """\
description = "two architectures, two seeds"

[settings]
task = "counting"
model = ["gru", "lstm"]
seed = "0,1"
scale = "smoke"
"train.lr" = 0.01

[settings.train]
steps = 12

[settings.slurm]
cpus = 1
"""


def test_a_study_file_is_flattened_into_sweep_settings(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(OWN)
    study = studies.load(str(path))
    assert study.name == "mine" and study.description == "two architectures, two seeds"
    assert study.settings == {"task": "counting", "model": "gru,lstm", "seed": "0,1",
                              "scale": "smoke", "train.lr": "0.01", "train.steps": "12",
                              "slurm.cpus": "1"}
    plan, options = parse([f"study={path}", "seed=3"])  # the command line overrides the file
    assert [(r.cfg.model, r.cfg.seed, r.cfg.train.steps, r.cfg.train.lr) for r in plan.runs] == \
        [("gru", 3, 12, 0.01), ("lstm", 3, 12, 0.01)]
    assert options.launcher == "local" and options.slurm.cpus == 1  # slurm.* from a file is no error
    assert plan.report_dir.as_posix() == "runs/study-mine"


def test_the_shipped_studies_are_files_of_the_package():
    for name in studies.names():
        study = studies.load(name)
        assert study.path.parent == studies.STUDY_DIR and study.description
        assert all({"task", "model", "scale"} <= set(sweep) for sweep in study.sweeps())
        parse([f"study={name}", "dry_run=true"])  # every run of every shipped study resolves


PARTS = """\
description = "two papers side by side"
[settings]
scale = "smoke"
seed = "0"
[[part]]
task = "binding"
model = "gpt12"
[[part]]
task = "counting"
model = "gru,lstm"
"train.lr" = 0.01
"""


def test_a_study_of_parts_runs_the_union_with_each_parts_own_settings(tmp_path):
    path = tmp_path / "parts.toml"
    path.write_text(PARTS)
    assert len(studies.load(str(path)).parts) == 2
    plan, _ = parse([f"study={path}", "seed=4"])  # the command line goes into every part
    got = [(r.cfg.task, r.cfg.model, r.cfg.seed, r.cfg.train.lr) for r in plan.runs]
    binding_lr = parse(["task=binding", "model=gpt12", "scale=smoke"])[0].runs[0].cfg.train.lr
    assert got == [("binding", "gpt12", 4, binding_lr), ("counting", "gru", 4, 0.01),
                   ("counting", "lstm", 4, 0.01)]  # the counting part's lr stays in its part
    assert binding_lr != 0.01 and plan.report_dir.as_posix() == "runs/study-parts"
    laptop = [(r.cfg.task, r.cfg.model) for r in parse(["study=laptop", "dry_run=true"])[0].runs]
    assert laptop == [("binding", "gpt12"), ("assign_add", "attn2"), ("counting", "gru"),
                      ("counting", "lstm"), ("counting", "rope2")]


@pytest.mark.parametrize("text, match", [
    (PARTS + "[[part]]\ntask = 'counting'\nmodel = 'gru'\njobs = 2\n",
     "parts set different sweep options"),
    ("part = 3\n", "part must be"),
])
def test_bad_parts_are_refused_in_one_line(tmp_path, text, match):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=match):
        parse([f"study={path}", "dry_run=true"])


@pytest.mark.parametrize("text, match", [
    ("[settings\ntask = 1", "not valid TOML"),
    ("tasks = 'counting'", "unknown entry 'tasks'"),
    ("[settings]\nmodel = { a = [1, {b = 2}] }", "not a string, number or boolean"),
])
def test_a_bad_study_file_is_refused_in_one_line(tmp_path, text, match):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=match):
        studies.load(str(path))


def test_an_unknown_study_names_the_choices():
    with pytest.raises(UsageError, match="choose from .*demo"):
        studies.load("nonesuch")
    with pytest.raises(UsageError, match="no such file"):
        studies.load("missing/study.toml")


def test_dry_run_lists_runs_and_writes_nothing(tmp_path):
    (tmp_path / "mine.toml").write_text(OWN)
    r = run_cli("sweep", "study=mine.toml", "dry_run=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "study mine: two architectures, two seeds"
    rows = [ln.split() for ln in lines[2:6]]
    assert [(row[2], row[3], row[4]) for row in rows] == [
        ("gru", "0", "pending"), ("gru", "1", "pending"), ("lstm", "0", "pending"), ("lstm", "1", "pending")]
    assert all(row[5].startswith("runs/counting-") for row in rows)
    assert "0 done, 0 running, 0 failed, 0 interrupted, 4 pending (of 4)" in r.stdout
    assert r.stdout.strip().endswith("dry run: nothing was run or submitted")
    slurm = run_cli("sweep", "study=mine.toml", "dry_run=true", "launcher=slurm", "slurm.gpus=1",
                    "slurm.time=30", cwd=tmp_path)  # no SLURM needed to see what would be submitted
    assert slurm.returncode == 0, slurm.stderr
    assert "would submit 4 runs as one SLURM job array" in slurm.stdout and "1 GPU(s)" in slurm.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


@pytest.mark.slow  # a sweep through the command line
def test_status_follows_a_sweep(tmp_path):
    args = ["task=counting", "model=gru", "scale=smoke", "seed=0,1", "train.steps=8"]
    before = run_cli("status", *args, cwd=tmp_path)
    assert before.returncode == 0 and "0 done, 0 running, 0 failed, 0 interrupted, 2 pending" in before.stdout
    done = run_cli("sweep", *[a for a in args if not a.startswith("seed=")], "seed=0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = run_cli("status", *args, cwd=tmp_path)
    assert "1 done, 0 running, 0 failed, 0 interrupted, 1 pending (of 2)" in after.stdout
    sweep_dir = next((tmp_path / "runs").glob("sweep-*"))
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["launcher"] == "local" and len(record["runs"]) == 1
    mine = run_cli("status", str(sweep_dir), cwd=tmp_path)
    assert "1 done, 0 running, 0 failed, 0 interrupted, 0 pending (of 1)" in mine.stdout
    assert mine.stdout.strip().splitlines()[-1].endswith("index.html")


@pytest.mark.slow  # two sweeps through the command line
def test_a_run_asked_with_other_analysis_settings_is_pending_again(tmp_path):
    """The dry run and `status` say what the sweep will do: a finished run whose analysis is
    now asked with other settings (its tables would be recomputed) is not done."""
    args = ["task=counting", "model=gru", "scale=smoke", "seed=0", "train.steps=8",
            "analyses=probes"]
    done = run_cli("sweep", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    same = run_cli("sweep", *args, "dry_run=true", cwd=tmp_path)
    assert "1 done, 0 running, 0 failed, 0 interrupted, 0 pending (of 1)" in same.stdout
    other = [*args, "probes.C=0.5"]
    plan = run_cli("sweep", *other, "dry_run=true", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "0 done, 0 running, 0 failed, 0 interrupted, 1 pending (of 1)" in plan.stdout
    assert "would run 1 of 1 runs" in plan.stdout
    status = run_cli("status", *other, cwd=tmp_path)
    assert "1 pending (of 1)" in status.stdout
    again = run_cli("sweep", *other, cwd=tmp_path)  # recorded with the new settings
    assert again.returncode == 0, again.stderr
    after = run_cli("status", str(next((tmp_path / "runs").glob("sweep-*"))), cwd=tmp_path)
    assert "1 done, 0 running, 0 failed, 0 interrupted, 0 pending (of 1)" in after.stdout


def test_the_grant_study_trains_as_the_authors_and_searches_their_das_with_controls():
    """`study=counting-grant` trains the paper's GRU and LSTM as Grant et al. train them (Adam at
    the paper's lr 1e-4, their warm-up and decay, no clipping, the loss on every next token,
    their code's 11,968 updates and no target accuracy, no voids), five seeds, and runs the
    `paper` DAS preset (their OAF and LAF, unstandardised, 20,000 updates at lr 1e-3, one
    training per k) at their k from 1 to 32, with both controls of both alignments at every k;
    the state it searches holds k = 32."""
    from study.core.registry import get

    plan, _ = parse(["study=counting-grant", "dry_run=true"])
    assert sorted((r.cfg.model, r.cfg.seed) for r in plan.runs) == [
        (m, s) for m in ("gru", "lstm") for s in range(5)]
    for r in plan.runs:
        t = r.cfg.train
        assert (t.lr, t.warmup_steps, t.schedule, t.decay_rate, t.min_lr) == (
            1e-4, 100, "inverse_sqrt", 0.5, 1e-7)
        assert (t.batch_size, t.grad_clip, t.weight_decay, t.steps, t.target_accuracy) == (
            128, 0.0, 0.0, 11_968, None)
        assert (t.loss_on, t.feed_outputs, t.precision) == ("all", "auto", "fp32")
        assert r.cfg.task_config.void_p == 0 and r.cfg.task_config.n_train == 1000
        assert r.cfg.model_config.d_state == 128
        das = r.cfg.analysis_configs["das"]
        paper = get("analysis", "das").make_config("paper")
        assert not das.standardize and not das.warm_start and das.lr_floor == 1.0
        assert (das.steps, das.lr, das.batch_size, das.n_train, das.n_test, das.stop_iia) == (
            paper.steps, paper.lr, paper.batch_size, paper.n_train, paper.n_test,
            paper.stop_iia) == (20_000, 1e-3, 128, 10_000, 1_000, 0.995)
        assert das.k == (1, 2, 4, 16, 32) and das.restarts == 1
        assert {"oaf", "laf_sd"} <= set(das.alignments)
        assert das.controls and das.control_k == "all"


def test_a_group_scale_that_is_no_scale_is_one_line():
    from study.run.config import resolve
    with pytest.raises(UsageError, match=r"das.scale='huge' is not a scale; choose from paper"):
        resolve({"task": "counting", "model": "gru", "analyses": "das", "das.scale": "huge"})


def test_the_shipped_studies_keep_their_run_directories():
    """A run's directory is named by the hash of what determines its weights: settings the code
    now holds fixed stay in it, and speed-only ones stay out, so the runs the shipped studies
    made are found again (the names of the runs they made at the time)."""
    want = {"counting-gru-s0-27c5148d", "counting-lstm-s0-d456616f", "counting-rope2-s0-781d9e05",
            "binding-gpt12-s0-ab94ed6d", "assign_add-attn2-s0-cd4ff8b3"}
    plan, _ = parse(["study=laptop", "dry_run=true"])
    assert {r.path.name for r in plan.runs} == want
    plan, _ = parse(["study=binding", "dry_run=true", "seed=0"])
    assert {r.path.name for r in plan.runs} == {
        "binding-gru-s0-9980eb64", "binding-lstm-s0-f51588bc", "binding-gpt12-s0-b4f40545",
        "binding-rope2-s0-7520a1af", "binding-attn2-s0-f358a8bd"}
