"""The result folders' `emergence` table: every run's walk with its cell, the atlas's null
and the step from which the variable stays above it, and no other table's columns moved."""
from __future__ import annotations

import math

from study.claims.results import TABLES, emergence_table
from tests.reports.test_emergence_section import STEPS, _run


def test_the_emergence_table_holds_every_run_and_step_with_where_the_variable_appears():
    runs = [_run("gru", 0, 100, 300), _run("lstm", 0, 300, 300)]
    runs[1].tables["emergence"].loc[runs[1].tables["emergence"]["variable"] == "answer",
                                    "iia_lo"] = 0.1  # never above the null
    df = emergence_table(runs)
    assert "emergence" in TABLES
    assert len(df) == 2 * 2 * len(STEPS)
    assert set(df["run"]) == {"gru s0", "lstm s0"} and set(df["seed"]) == {0}
    first = df.groupby(["run", "variable"])["appears_at"].first()
    assert first[("gru s0", "resolved")] == 100 and first[("lstm s0", "resolved")] == 300
    assert math.isnan(first[("lstm s0", "answer")])
    assert not df["time_limited"].any()
    assert list(df["step"][:len(STEPS)]) == STEPS  # each run's walk in step order


def test_runs_without_the_analysis_give_an_empty_table_with_its_columns():
    run = _run("gru", 0, 100, 300)
    run.tables = {}
    df = emergence_table([run])
    assert df.empty and "appears_at" in df.columns
