"""Sweeps expand comma lists into runs; tuple-valued fields and analyses keep their commas."""
import pytest

from study.core.errors import UsageError
from study.sweep import STUDIES, expand
from study.config import resolve


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
    for name, kv in STUDIES.items():
        for combo in expand(dict(kv)):
            resolve(combo)


def test_analysis_tuple_settings_are_not_expanded():
    combos = expand({"task": "counting", "model": "gru", "analyses": "das",
                     "das.alignments": "oaf,laf", "das.k": "1,2,4"})
    assert len(combos) == 1
    cfg = resolve(combos[0])
    assert cfg.analysis_configs["das"].alignments == ("oaf", "laf")
    assert cfg.analysis_configs["das"].k == (1, 2, 4)


def test_jobs_setting():
    from study.sweep import parse_jobs
    assert parse_jobs("3", 2) == 2  # never more processes than runs
    assert 1 <= parse_jobs("auto", 5) <= 5
    for bad in ("0", "-1", "many"):
        with pytest.raises(UsageError, match="jobs="):
            parse_jobs(bad, 3)


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
