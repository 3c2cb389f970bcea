"""The emergence section: one chart per task drawing every family's IIA along training
beside its accuracy and phase boundaries, as wide as half the page with a legend for its
colours, and the sentence that places each variable's appearance against the phases."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from study.claims.runs import RunTables
from study.reports.sections.emergence import build
from tests.reports.test_chart_layout import layout_problems

STEPS = [0, 10, 30, 100, 300, 1000]


def _run(model: str, seed: int, appears: int, jump: int) -> RunTables:
    """A run whose accuracy jumps from 0.1 to 1 at `jump` and whose variables' IIA rises
    above the null (0.3) at `appears`."""
    evals = np.arange(0, 1001, 10)
    metrics = pd.DataFrame({"step": evals, "split": "val", "stratum": "all",
                            "metric": "accuracy", "value": np.where(evals >= jump, 1.0, 0.1)})
    rows = [dict(checkpoint=1000, step=s, variable=v, role="rhs@2", site="resid", layer=1, k=2,
                 iia=(0.95 if s >= appears else 0.2), iia_lo=(0.9 if s >= appears else 0.1),
                 iia_hi=(0.99 if s >= appears else 0.3), train_iia=0.9, shuffled_iia=0.2,
                 null=0.3, n_tested=200, too_few=False)
            for v in ("resolved", "answer") for s in STEPS]
    return RunTables(Path(f"/runs/counting-{model}-s{seed}"),
                     {"task": "counting", "model": model, "seed": seed}, {}, "done", metrics,
                     None, {"emergence": pd.DataFrame(rows)}, label=f"{model} s{seed}")


def test_one_chart_per_task_draws_every_family_and_says_when_each_appears():
    runs = [_run("gru", 0, 100, 300), _run("gru", 1, 100, 300), _run("lstm", 0, 300, 300),
            _run("rope2", 0, 1000, 100)]
    figures = build(runs)
    assert len(figures) == 1
    fig = figures[0]
    assert layout_problems(fig) == []
    spec = fig.spec()
    values = [row for data in spec["datasets"].values() for row in data]
    drawn = {(r["model"], r["layer"]) for r in values}
    for model in ("gru", "lstm", "rope2"):
        assert {(model, "iia"), (model, "accuracy"), (model, "boundary"), (model, "null")} <= drawn
    assert {r["run"] for r in values} == {"gru s0", "gru s1", "lstm s0", "rope2 s0"}
    assert "gru s0's resolved appears at update 100, before its accuracy leaves the plateau " \
           "(phase boundary 300)." in fig.points
    assert "lstm s0's answer appears at update 300, with its accuracy leaving the plateau " \
           "(phase boundary 300)." in fig.points
    assert "rope2 s0's resolved appears at update 1,000, after its accuracy left the plateau " \
           "(phase boundary 100)." in fig.points
    assert list(fig.table["appears at (update)"]) == [100, 100, 100, 100, 300, 300, 1000, 1000]


def test_no_emergence_table_no_chart():
    run = _run("gru", 0, 100, 300)
    run.tables = {}
    assert build([run]) == []
