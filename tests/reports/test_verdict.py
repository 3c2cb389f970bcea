"""The verdict section: the rule on planted numbers gives each verdict, the table reads the
candidate by training IIA and both controls, and its chart has data for every encoding."""
import math
from pathlib import Path

import pandas as pd
import pytest

from study.reports.load import RunTables
from study.reports.sections.das import build as das_build
from study.reports.sections.verdict import (ALIGNED_IIA, MARGIN, build, verdict, verdict_numbers,
                                      verdict_table)
from tests.reports.test_sections import problems


def test_the_rule_gives_each_verdict():
    assert verdict(0.97, 0.95, 0.30, 0.60) == "aligned"  # 0.95 >= 0.60 + 0.1, IIA >= 0.9
    assert verdict(0.80, 0.74, 0.30, 0.60) == "partial"  # clears both, IIA < 0.9
    assert verdict(0.95, 0.65, 0.30, 0.60) == "not aligned"  # lower end within the margin
    assert verdict(0.95, 0.92, 0.85, 0.10) == "not aligned"  # the random rotation does as well
    assert verdict(float("nan"), float("nan"), 0.1, 0.1) == "too few pairs"
    assert verdict(0.97, 0.95, 0.30, float("nan")) == "no control"
    assert MARGIN == 0.1 and ALIGNED_IIA == 0.9


def _rows(checkpoint, alignment, k, train, test, lo=None, hi=None, variable="count",
          too_few=False):
    base = dict(checkpoint=checkpoint, variable=variable, site="state", layer=0, position=-1,
                alignment=alignment, k=k, n_pairs=500, n_changed=60, n_tested=60, too_few=too_few,
                iia_all=0.9, iia_restart_sd=0.01)
    nan = float("nan")
    return [{**base, "split": "train", "iia": train, "iia_lo": nan, "iia_hi": nan},
            {**base, "split": "test", "iia": test,
             "iia_lo": test - 0.02 if lo is None else lo,
             "iia_hi": test + 0.02 if hi is None else hi}]


# model -> (das rows, das_control rows); the comments give each run's expected verdict
PLANTED = {
    # aligned: oaf k=2 has the best train IIA (0.99): test 0.96 [0.93, 0.98]; controls 0.2/0.5
    "gru": ([*_rows(20, "oaf", 2, 0.99, 0.96, 0.93, 0.98), *_rows(20, "laf", 2, 0.98, 0.99),
             *_rows(20, "random", 2, 0.2, 0.2)],
            [*_rows(0, "oaf", 2, 0.6, 0.5), *_rows(0, "laf", 2, 0.5, 0.45)]),
    # partial: laf k=4 best by train; 0.8 [0.75, 0.85] clears max(0.3, 0.6) + 0.1 = 0.7
    "lstm": ([*_rows(20, "oaf", 4, 0.7, 0.7), *_rows(20, "laf", 4, 0.85, 0.8, 0.75, 0.85),
              *_rows(20, "random", 4, 0.3, 0.3)],
             [*_rows(0, "oaf", 4, 0.6, 0.6)]),
    # not aligned: 0.95 [0.9, 0.97] but the step-0 control reaches 0.85 (0.9 < 0.95)
    "rope2": ([*_rows(20, "oaf", 2, 0.99, 0.95, 0.9, 0.97), *_rows(20, "random", 2, 0.1, 0.1)],
              [*_rows(0, "laf", 2, 0.9, 0.85)]),
}
EXPECTED = {"gru": ("aligned", 0.96, 0.2, 0.5), "lstm": ("partial", 0.8, 0.3, 0.6),
            "rope2": ("not aligned", 0.95, 0.1, 0.85)}


def _run(model, das, control):
    tables = {"das": pd.DataFrame(das), "das_control": pd.DataFrame(control)}
    return RunTables(Path(f"/nonexistent/{model}"), {"task": "counting", "model": model, "seed": 0},
               {}, "done", None, None, tables, label=f"{model} s0")


@pytest.fixture
def planted():
    return [_run(m, das, control) for m, (das, control) in PLANTED.items()]


def test_verdicts_on_planted_tables(planted):
    numbers = verdict_numbers(planted).set_index("model")
    for model, (want, iia, random, step0) in EXPECTED.items():
        row = numbers.loc[model]
        assert row["verdict"] == want, (model, row.to_dict())
        assert row["iia"] == pytest.approx(iia)
        assert row["random"] == pytest.approx(random) and row["step0"] == pytest.approx(step0)
    assert numbers.loc["gru", "where"] == "oaf k=2 state"  # by train IIA, not laf's test 0.99
    table = verdict_table(verdict_numbers(planted))
    assert list(table.columns) == ["model", "seed", "count"]
    assert table.loc[table["model"] == "lstm", "count"].item().startswith("partial: 0.80 [0.75")


def test_too_few_changed_pairs_is_reported_not_scored(planted):
    nan = float("nan")
    run = _run("gru", [*_rows(20, "oaf", 2, nan, nan, nan, nan, too_few=True),
                       *_rows(20, "random", 2, nan, nan, nan, nan, too_few=True)], [])
    (row,) = verdict_numbers([run]).to_dict("records")
    assert row["verdict"] == "too few pairs" and row["too_few"] and math.isnan(row["iia"])
    assert verdict_table(verdict_numbers([run]))["count"].item() == "too few tested pairs"


def test_the_section_opens_with_the_table_and_its_chart_and_das_draw_both_controls(planted):
    figs = build(planted)
    assert [f.key for f in figs] == ["verdict", "verdict-rule", "verdict-iia"]
    assert figs[0].table is not None and len(figs[0].table) == 3
    spec = figs[2].spec()
    assert not problems(spec), problems(spec)
    rows = [r for rs in spec["datasets"].values() for r in rs]
    assert {r["run"] for r in rows} == {"gru s0", "lstm s0", "rope2 s0"}
    das = {f.key: f for f in das_build(planted)}["das-iia"].spec()
    assert not problems(das), problems(das)
    drawn = {r["alignment"] for rs in das["datasets"].values() for r in rs}
    assert {"oaf", "laf", "random", "oaf step 0", "laf step 0"} <= drawn
