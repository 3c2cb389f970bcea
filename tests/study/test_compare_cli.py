"""`study compare`: bad input is one line on stderr and exit code 2, nothing written."""
from tests.conftest import run_cli


def test_compare_refuses_missing_runs_and_unknown_settings(tmp_path):
    done = run_cli("compare", cwd=tmp_path)
    assert done.returncode == 2 and "usage: compare RUN_DIR" in done.stderr
    done = run_cli("compare", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "not a run directory" in done.stderr
    (tmp_path / "config.json").write_text("{}")
    done = run_cli("compare", str(tmp_path), "compare.alignment=pca", cwd=tmp_path)
    assert done.returncode == 2 and "compare.alignment='pca'" in done.stderr
    done = run_cli("compare", str(tmp_path), "compare.nope=1", cwd=tmp_path)
    assert done.returncode == 2 and "unknown setting" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
