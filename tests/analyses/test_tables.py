"""The analysis tables are declared once (`study/core/tables.py`): the names the reports read
are the names the analyses write, and a table off its schema is refused. Every analysis's
smoke run checks its written tables against these schemas (`tests/analyses/test_device.py`)."""
from __future__ import annotations

import ast

import pandas as pd
import pytest

from study.core import tables
from tests.conftest import ROOT, project_entries


def test_check_refuses_a_missing_an_undeclared_or_a_reordered_column():
    das = tables.DAS
    tables.check("das", das.frame())
    with pytest.raises(ValueError, match="missing \\['confound_answer'\\]"):
        tables.check("das", pd.DataFrame(columns=list(das.columns[:-1])))
    with pytest.raises(ValueError, match="undeclared \\['extra'\\]"):
        tables.check("das", pd.DataFrame(columns=[*das.columns, "extra"]))
    with pytest.raises(ValueError, match="its schema"):
        tables.check("das", pd.DataFrame(columns=list(reversed(das.columns))))
    with pytest.raises(ValueError, match="not declared"):
        tables.check("nope", das.frame())
    with pytest.raises(ValueError, match="declared \\['das', 'das_control', 'das_shuffled', "
                                         "'das_strata', 'das_transfer'\\]"):
        tables.check_outputs("das", {"das": das.frame()})


def test_every_analysis_that_writes_tables_has_them_declared():
    writers = {t.analysis for t in tables.TABLES.values()}
    assert writers - {"compare"} <= set(project_entries("analysis"))
    for name in project_entries("analysis"):
        assert tables.of_analysis(name), f"analysis {name} writes no declared table"


def test_reports_read_tables_by_their_declared_names():
    """A report section asks a run for a table by its schema (`tables.DAS.name`), never by a
    name typed again: a renamed table is renamed in one place."""
    typed = []
    for path in sorted((ROOT / "study" / "reports").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
            name = getattr(func, "attr", getattr(func, "id", None))
            if name in ("final", "stacked", "cross_table", "get"):
                typed += [f"{path.relative_to(ROOT)}:{node.lineno} {a.value!r}" for a in node.args
                          if isinstance(a, ast.Constant) and a.value in tables.TABLES]
    assert not typed, f"table names typed in reports: {typed}"
