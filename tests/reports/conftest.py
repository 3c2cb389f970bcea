"""Real run directories for report tests: smoke-scale runs with every analysis, built once."""
from pathlib import Path

import pytest

from tests.conftest import built_once

# (task, model, seed, analyses): three architectures on counting (one with two seeds, so the
# report shows spreads) and an attention model on binding (circuits, head rankings).
RUNS = [
    ("counting", "gru", 0, "patching,das,probes"),
    ("counting", "gru", 1, "patching,das,probes"),
    ("counting", "lstm", 0, "patching,das,probes"),
    ("counting", "rope2", 0, "patching,das,probes"),
    ("binding", "rope2", 0, "patching,das,probes,circuits,subspaces"),
]


# das on one variable of each of counting's three programs (not all seven), at one restart (the
# smoke preset's second only narrows its spread): every section still has each run's rows
DAS = {"counting": {"das.variables": "up_down:count,up_up:demo_count,ctx_distr:count"}}


def make_run(root: Path, task: str, model: str, seed: int, analyses: str, name: str | None = None):
    """Train and analyse one smoke run in-process; returns its directory."""
    from study.run.config import resolve
    from study.run.runner import run

    run_dir = root / (name or f"{task}-{model}-s{seed}")
    das = {"das.restarts": "1", **DAS.get(task, {})} if "das" in analyses.split(",") else {}
    cfg = resolve({"task": task, "model": model, "scale": "smoke", "seed": str(seed),
                   "analyses": analyses, **das, "run_dir": str(run_dir)})
    return run(cfg).path


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory) -> list[Path]:
    """Five finished smoke runs (see RUNS), each with its analyses and report.html."""
    with built_once(tmp_path_factory, "report-runs") as root:
        return [make_run(root, *spec) for spec in RUNS]


@pytest.fixture(scope="session")
def counting_runs(smoke_runs) -> list[Path]:
    return [p for p in smoke_runs if p.name.startswith("counting")]
