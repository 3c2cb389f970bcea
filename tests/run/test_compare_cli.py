"""`study compare`: bad input is one line on stderr and exit code 2, nothing written (the
commands run in this process: `study.cli.main`, what `python -m study` calls)."""
import pytest

from study.cli import main


@pytest.fixture
def refused(tmp_path, monkeypatch, capsys):
    """`refused(*args)`: `study ARGS` run in tmp_path exits 2; its one line on stderr."""
    monkeypatch.chdir(tmp_path)

    def call(*args):
        capsys.readouterr()
        code = main(list(args))
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        return err
    return call


def test_compare_refuses_missing_runs_and_unknown_settings(tmp_path, refused):
    assert "usage: compare RUN_DIR" in refused("compare")
    assert "not a run directory" in refused("compare", str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert "compare.alignment='pca'" in refused("compare", str(tmp_path), "compare.alignment=pca")
    assert "unknown setting" in refused("compare", str(tmp_path), "compare.nope=1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_a_sweep_checks_its_compare_settings_before_any_run_and_carries_them(tmp_path, refused):
    from study.sweep.plan import parse
    args = ["task=counting", "model=gru,lstm", "scale=smoke", f"run_dir={tmp_path}/x"]
    assert "compare.site: 'resid1' is neither" in refused("sweep", *args[:3], "compare.site=resid1")
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing trained
    plan, _ = parse([*args[:3], "compare.site=state@21,resid[1]@21", "compare.k=2"])
    assert (plan.compare.site, plan.compare.k) == (("state@21", "resid[1]@21"), (2,))
    assert all("compare.site" not in r.combo for r in plan.runs)  # not part of a run's identity
