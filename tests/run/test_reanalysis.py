"""Re-running an analysis never damages the run's previous outputs: a k larger than the site
is refused when the command is parsed, and a re-analysis that fails midway leaves the
tables, alignments, settings and report as they were (each analysis writes into a copy of
its folder that is swapped in whole once its tables are written)."""
from __future__ import annotations

import hashlib
import shutil

import pytest

from study.cli import main

FAST = ["das.variables=up_down:count", "das.k=1,2", "das.steps=3", "das.restarts=1",
        "das.controls=false", "das.n_train=64", "das.n_test=64"]


def _outputs(run) -> dict:
    """Every file of the run's analyses and its report, by relative path -> its digest (an
    interrupted search's snapshots, `partial/`, are work in progress, kept to continue it)."""
    files = [*run.glob("analyses/**/*"), run / "report.html"]
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files if p.is_file() and "partial" not in p.relative_to(run).parts}


@pytest.fixture
def analysed(trained_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_runs("gru"), run)
    assert (run / "analyses" / "das" / "alignments.safetensors").is_file()
    return run


def test_a_k_larger_than_the_site_is_refused_before_anything_is_written(analysed, capsys):
    before = _outputs(analysed)
    rc = main(["analyze", str(analysed), "analysis=das", "das.k=999"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert err.count("\n") == 1 and "k=999" in err and "16 dims" in err, err
    assert _outputs(analysed) == before


def test_an_interrupted_reanalysis_leaves_the_previous_outputs(analysed, monkeypatch):
    import study.analyses.das.export as export

    before = _outputs(analysed)

    def fail(*args, **kwargs):  # after the new alignments are written, before the tables
        raise RuntimeError("injected failure")

    monkeypatch.setattr(export, "export", fail)
    with pytest.raises(RuntimeError, match="injected"):
        main(["analyze", str(analysed), "analysis=das", *FAST])
    assert _outputs(analysed) == before
    assert not [p for p in (analysed / "analyses").iterdir() if p.name.startswith(".")]
    assert any((analysed / "analyses" / "das" / "partial").iterdir())  # kept to continue


def test_a_finished_reanalysis_replaces_the_outputs_and_drops_its_work_in_progress(analysed):
    before = _outputs(analysed)
    assert main(["analyze", str(analysed), "analysis=das", *FAST]) == 0
    after = _outputs(analysed)
    das = "analyses/das/das.parquet"
    assert after[das] != before[das]
    assert not (analysed / "analyses" / "das" / "partial").exists()
    assert sorted(p.name for p in (analysed / "analyses").iterdir()) == ["das", "patching"]


def test_a_k_no_site_holds_is_refused_when_searched_and_changes_nothing(analysed, capsys,
                                                                         monkeypatch):
    """Where the width is not known when parsing (a family whose config names it otherwise),
    the search refuses the ladder before training anything; the run is left as it was."""
    import study.analyses.das.analysis as das
    monkeypatch.setattr(das, "_site_width", lambda kind, config: None)
    before = _outputs(analysed)
    rc = main(["analyze", str(analysed), "analysis=das", *FAST[:1], "das.k=999",
               *FAST[2:]])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert "every k is larger than" in err.strip().splitlines()[-1] and "16 dims" in err
    assert _outputs(analysed) == before
