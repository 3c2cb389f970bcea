"""Sweeps expand comma lists into runs; tuple-valued fields and analyses keep their commas;
how a sweep executes (launcher, jobs, GPUs, SLURM resources) never changes its runs."""
import pytest

from study.sweep import studies
from study.core.errors import UsageError
from study.sweep.plan import expand, parse
from study.run.config import resolve


def test_expands_cartesian_product():
    combos = expand({"task": "counting", "model": "gru,lstm", "seed": "0,1,2", "scale": "smoke"})
    assert len(combos) == 6
    assert {(c["model"], c["seed"]) for c in combos} == {(m, s) for m in ("gru", "lstm") for s in "012"}


def test_tuple_fields_and_analyses_are_not_expanded():
    combos = expand({"task": "counting", "model": "gru", "train.betas": "0.9,0.99",
                     "analyses": "patching,das"})
    assert len(combos) == 1
    assert resolve(combos[0]).train.betas == (0.9, 0.99)


def test_distinct_runs_get_distinct_directories():
    combos = expand({"task": "counting", "model": "gru,lstm", "seed": "0,1", "scale": "smoke"})
    paths = {resolve(c).path for c in combos}
    assert len(paths) == 4


def test_run_dir_cannot_be_swept():
    with pytest.raises(UsageError):
        expand({"task": "counting", "model": "gru", "run_dir": "x"})


def test_predefined_studies_resolve():
    assert {"demo", "counting", "binding-paper", "assign_add-paper"} <= set(studies.names())
    for name in studies.names():
        plan, _ = parse([f"study={name}"])
        assert plan.runs and plan.report_dir.as_posix() == f"runs/study-{name}"


def test_execution_settings_leave_the_runs_alone():
    """launcher, jobs, gpus, wait, dry_run and slurm.* are no part of a run's identity: the same
    runs, in the same directories, however the sweep is executed."""
    base = ["task=counting", "model=gru,lstm", "scale=smoke", "seed=0,1"]
    plain, _ = parse(base)
    for extra in (["jobs=2", "gpus=none"], ["jobs=auto", "dry_run=true"],
                  ["launcher=slurm", "slurm.partition=gpu", "slurm.gpus=1", "slurm.time=240",
                   "slurm.cpus=8", "slurm.mem_gb=32", "slurm.setup=module load cuda",
                   "slurm.array_parallelism=4", "wait=false"]):
        other, _ = parse(base + extra)
        assert [r.path for r in other.runs] == [r.path for r in plain.runs], extra
        assert [r.cfg.hash8() for r in other.runs] == [r.cfg.hash8() for r in plain.runs]
        assert all("slurm" not in k and k not in ("jobs", "launcher", "wait")
                   for r in other.runs for k in r.combo)


def test_analysis_tuple_settings_are_not_expanded():
    combos = expand({"task": "counting", "model": "gru", "analyses": "das",
                     "das.alignments": "oaf,laf", "das.k": "1,2,4"})
    assert len(combos) == 1
    cfg = resolve(combos[0])
    assert cfg.analysis_configs["das"].alignments == ("oaf", "laf")
    assert cfg.analysis_configs["das"].k == (1, 2, 4)


def test_sweep_options_are_checked_when_parsed():
    base = ["task=counting", "model=gru", "scale=smoke"]
    for bad, match in ((["jobs=0"], "jobs="), (["jobs=many"], "jobs="), (["gpus=a,b"], "gpus="),
                       (["gpus=0,0"], "gpus="), (["launcher=pbs"], "launcher="),
                       (["slurm.time=10"], "add launcher=slurm"),
                       (["wait=false"], "wait=false needs launcher=slurm"),
                       (["launcher=slurm", "slurm.gpus=-1"], "slurm.gpus"),
                       (["launcher=slurm", "slurm.time=1", "slurm.signal_delay_s=90"], "signal_delay_s"),
                       (["launcher=slurm", "slurm.nodes=2"], "unknown key 'slurm.nodes'"),
                       (["launcher=slurm", "jobs=4"], "jobs= is for launcher=local")):
        with pytest.raises(UsageError, match=match):
            parse(base + bad)


@pytest.mark.slow  # two sweeps of subprocess runs: a minute
def test_parallel_sweep_equals_sequential_runs(tmp_path):
    """Two runs in parallel processes finish, each logs to its run.log, the report lists both,
    and a second sweep skips them (nothing retrained)."""
    import json

    from tests.conftest import run_cli

    args = ["sweep", "task=counting", "model=gru,lstm", "scale=smoke", "analyses=probes",
            "jobs=2"]
    first = run_cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    lines = first.stdout.strip().splitlines()
    runs = [tmp_path / line for line in lines[:-1]]
    assert len(runs) == 2 and lines[-1].startswith("report: ")
    for rd in runs:
        assert json.loads((rd / "status.json").read_text())["status"] == "done"
        assert (rd / "run.log").stat().st_size > 0 and (rd / "report.html").exists()
    page = (tmp_path / lines[-1].removeprefix("report: ")).read_text()
    assert "gru s0" in page and "lstm s0" in page
    mtimes = [(rd / "metrics.parquet").stat().st_mtime_ns for rd in runs]
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [(rd / "metrics.parquet").stat().st_mtime_ns for rd in runs] == mtimes


@pytest.mark.slow  # two subprocess runs and the comparisons: about a minute on two cores
def test_sweep_ends_with_comparisons_across_its_runs_and_draws_them(tmp_path):
    """A sweep whose runs saved das alignments compares them before the report: tables under
    the report's comparisons/ and each run's analyses/compare/, sections in the page."""
    import pandas as pd

    from tests.conftest import run_cli

    done = run_cli("sweep", "task=counting", "model=gru,lstm", "scale=smoke", "analyses=das",
                   "das.variables=up_down:count", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    report = tmp_path / lines[-1].removeprefix("report: ")
    stitching = pd.read_parquet(report.parent / "comparisons" / "compare_stitching.parquet")
    assert len(stitching) == 4 and set(stitching["variable"]) == {"up_down:count"}
    for line in lines[:-1]:
        assert (tmp_path / line / "analyses" / "compare" / "compare_similarity.parquet").is_file()
    page = report.read_text()
    for anchor in ("counting-compare-similarity-up_down-count",
                   "counting-compare-geometry-up_down-count",
                   "counting-compare-stitching-up_down-count"):
        assert f'id="{anchor}"' in page
