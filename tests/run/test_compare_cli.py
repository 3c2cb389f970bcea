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


def test_a_sweep_checks_its_compare_settings_before_any_run_and_carries_them(tmp_path):
    from study.sweep.plan import parse
    args = ["task=counting", "model=gru,lstm", "scale=smoke", f"run_dir={tmp_path}/x"]
    done = run_cli("sweep", *args[:3], "compare.site=resid1", cwd=tmp_path)
    assert done.returncode == 2 and "compare.site: 'resid1' is neither" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing trained
    plan, _ = parse([*args[:3], "compare.site=state@21,resid[1]@21", "compare.k=2"])
    assert (plan.compare.site, plan.compare.k) == (("state@21", "resid[1]@21"), (2,))
    assert all("compare.site" not in r.combo for r in plan.runs)  # not part of a run's identity
