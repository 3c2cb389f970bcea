"""`python -m study report ...` and the report a sweep ends with: paths on stdout, and bad
input as one `error:` line with exit 2 and nothing written."""
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _no_page_written(root: Path) -> bool:
    return not any(root.rglob("index.html")) and not any(root.rglob("report.md"))


@pytest.mark.parametrize("case", ["missing", "not_a_run", "unknown_option", "damaged"])
def test_bad_report_input_is_one_error_line_exit_2_and_writes_nothing(case, counting_runs, tmp_path):
    import shutil
    if case == "missing":
        args, needle = [str(tmp_path / "nope")], "does not exist"
    elif case == "not_a_run":
        (tmp_path / "plain").mkdir()
        args, needle = [str(tmp_path / "plain")], "not a run directory"
    elif case == "unknown_option":
        args, needle = [str(counting_runs[0]), "colour=red", f"out={tmp_path / 'o'}"], "colour"
    else:
        run = shutil.copytree(counting_runs[0], tmp_path / "run",
                              ignore=shutil.ignore_patterns("checkpoints", "report*"))
        (run / "metrics.parquet").write_bytes(b"damaged")
        args, needle = [str(run)], "metrics.parquet"
    r = run_cli("report", *args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert needle in lines[0]
    assert r.stdout == ""
    assert _no_page_written(tmp_path)
    assert _no_page_written(counting_runs[0])


def test_report_of_two_runs_prints_the_page_path(counting_runs, tmp_path):
    a, b = counting_runs[0], counting_runs[2]
    out = tmp_path / "cmp"
    r = run_cli("report", str(a), str(b), f"out={out}", "markdown=false", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [str(out / "index.html")]
    page = (out / "index.html").read_text()
    for label in ("gru s0", "lstm s0"):
        assert label in page
    assert not (out / "report.md").exists()


@pytest.mark.slow  # a sweep through the command line
def test_sweep_ends_with_the_report_line(tmp_path):
    # One smoke run without analyses (seconds): the comparative report is the last line.
    r = run_cli("sweep", "task=counting", "model=gru", "scale=smoke", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("report: ")
    page = tmp_path / last.removeprefix("report: ")
    assert page.name == "index.html" and page.is_file()
    assert (page.parent / "report.md").is_file()
    run_dirs = [tmp_path / line for line in r.stdout.strip().splitlines()[:-1]]
    assert len(run_dirs) == 1 and (run_dirs[0] / "report.html").is_file()
