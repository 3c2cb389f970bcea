"""`report` on several runs, one of them damaged, names the damaged file or analysis folder in
one line and still reports the others: a table that cannot be read, and tables that read but
that a section cannot draw (a das table whose restart spread is None, as a re-analysis that
skipped every k once left it)."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from study.cli import main


@pytest.fixture
def pair(trained_runs, tmp_path):
    """(damaged copy, healthy copy) of a finished run with das and patching tables."""
    runs = []
    for name in ("damaged", "healthy"):
        runs.append(tmp_path / name)
        shutil.copytree(trained_runs("gru"), runs[-1])
    return runs


def _warnings(capsys, rc) -> list[str]:
    captured = capsys.readouterr()
    assert rc == 0 and "Traceback" not in captured.err, captured.err
    return [line for line in captured.err.splitlines() if line.startswith("warning")]


def test_an_unreadable_table_names_the_file_and_the_other_run_is_reported(pair, tmp_path,
                                                                           capsys):
    damaged, healthy = pair
    table = damaged / "analyses" / "das" / "das.parquet"
    table.write_bytes(table.read_bytes()[:100])
    out = tmp_path / "report"
    lines = _warnings(capsys, main(["report", str(damaged), str(healthy), f"out={out}"]))
    assert len(lines) == 1 and str(table) in lines[0], lines
    page = (out / "index.html").read_text()
    assert "gru s0" in page and "gru s0 (damaged)" not in page  # the damaged run left out


def test_tables_a_section_cannot_draw_name_their_analysis_and_the_rest_is_reported(
        pair, tmp_path, capsys):
    damaged, healthy = pair
    table = damaged / "analyses" / "das" / "das.parquet"
    df = pd.read_parquet(table)
    df["iia_restart_sd"] = pd.Series([None] * len(df), dtype=object)
    df.to_parquet(table, index=False)
    out = tmp_path / "report"
    lines = _warnings(capsys, main(["report", str(damaged), str(healthy), f"out={out}"]))
    assert len(lines) == 1 and str(damaged / "analyses" / "das") in lines[0], lines
    assert f"analyze {damaged} analysis=das" in lines[0]
    assert "gru s0 (damaged)" in (out / "index.html").read_text()  # the run, without das
    # alone, the damaged run's report still has everything but the damaged analysis
    lines = _warnings(capsys, main(["report", str(damaged), f"out={tmp_path / 'alone'}"]))
    assert len(lines) == 1
    assert "Training" in (tmp_path / "alone" / "index.html").read_text()
