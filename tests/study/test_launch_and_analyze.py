"""A parallel sweep creates nothing for a run it may not start, and `analyze` writes its report
under the run directory's claim."""
from __future__ import annotations

import json
import os
import socket
import time

import pytest

from study.cli import main
from study.config import resolve
from study.core.claim import CLAIM, holds
from study.core.errors import UsageError
from study.launch import run_parallel

BASE = {"task": "counting", "model": "gru", "scale": "smoke"}


def test_parallel_sweep_refuses_before_creating_anything(tmp_path):
    foreign = tmp_path / "notes"  # someone's folder, not a run
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    held = tmp_path / "held"  # a run directory another live process holds
    held.mkdir()
    (held / CLAIM).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                          "since": time.time(), "what": "run"}))
    combos = [{**BASE, "run_dir": str(p)} for p in (foreign, held)]
    with pytest.raises(UsageError, match="2 of 2 runs failed"):
        run_parallel(combos, [resolve(c) for c in combos], jobs=2)
    assert sorted(p.name for p in foreign.iterdir()) == ["todo.txt"]
    assert sorted(p.name for p in held.iterdir()) == [CLAIM]


def test_analyze_writes_the_report_holding_the_claim(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert main(["run", *(f"{k}={v}" for k, v in BASE.items()), f"run_dir={run_dir}"]) == 0
    seen = []
    import study.runner
    monkeypatch.setattr(study.runner, "write_report", lambda rd: seen.append(holds(rd.path)))
    assert main(["analyze", str(run_dir), "analysis=probes"]) == 0
    assert seen == [True]


def test_reanalysing_replaces_the_rows_of_the_checkpoints_it_writes(tmp_path):
    """das_control's rows name step 0 whatever checkpoint is analysed: analysing again
    replaces them instead of stacking a second copy; other checkpoints' rows stay."""
    import pandas as pd

    from study.analyze import _merge_checkpoints
    path = tmp_path / "das_control.parquet"
    pd.DataFrame({"checkpoint": [0, 0, 7], "iia": [0.1, 0.2, 0.9]}).to_parquet(path)
    merged = _merge_checkpoints(path, pd.DataFrame({"checkpoint": [0, 0], "iia": [0.3, 0.4]}), 50)
    assert sorted(merged["iia"]) == [0.3, 0.4, 0.9]
    merged = _merge_checkpoints(path, pd.DataFrame({"iia": [0.5]}), 7)  # no column: the step
    assert sorted(merged["iia"]) == [0.1, 0.2, 0.5]
