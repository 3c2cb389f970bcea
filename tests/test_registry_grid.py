"""The task × model × analysis grid, read from the registries at collection time.

A newly registered task, model family or analysis gets these tests without editing a list:
- every model trains on every task at `scale=smoke` (finite loss, a checkpoint and a summary);
- every analysis runs on every model whose capabilities satisfy its `requires`, on every
  task with counterfactual pairs, and writes non-empty tables;
- an analysis a model cannot support is refused when the command is parsed.
"""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from study.run.config import resolve
from study.core.errors import UsageError
from study.core import registry
from study.run.runner import build_task, prepare
from study.train.checkpoint import list_checkpoints
from study.train.loop import train


def project_entries(kind: str) -> dict:
    """The registry's entries of a kind that the project's own package registers (tests may
    register throw-away entries of their own, which are not part of the grid)."""
    return registry.builtin(kind)


TASKS = project_entries("task")
MODELS = project_entries("model")
ANALYSES = project_entries("analysis")

# A few steps, two logged checkpoints after step 0: enough to exercise the whole engine and to
# give analyses an earlier checkpoint to compare with.
SMOKE = {"scale": "smoke", "train.steps": "3", "train.checkpoints": "2",
         "train.eval_examples": "32"}


# DAS searches the task's headline variables only: the grid checks that each analysis runs on
# each network (every variable's pairs are the task tests' business, and every variable's DAS
# the report tests').
GRID_SETTINGS = {"das": {"das.variables": "main"}}


def _supports(model: str, analysis: str) -> bool:
    return ANALYSES[analysis].requires <= MODELS[model].capabilities


def _train(task: str, model: str, run_dir) -> dict:
    cfg = resolve({"task": task, "model": model, "run_dir": str(run_dir), **SMOKE})
    rd = prepare(cfg)
    return train(rd, build_task(cfg), MODELS[model], cfg.model_config, cfg.train, cfg.seed)


@pytest.mark.slow  # every pair trained: the fast tier trains the toy entries (test_toy_*.py)
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("task", list(TASKS))
def test_every_model_trains_on_every_task(task, model, tmp_path):
    summary = _train(task, model, tmp_path / "run")
    assert summary["steps_done"] == 3
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    losses = metrics[(metrics["split"] == "train") & (metrics["metric"] == "loss")]["value"]
    assert len(losses) and all(math.isfinite(v) for v in losses)
    assert math.isfinite(summary["train_loss"])
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps_done"] == 3
    steps = list_checkpoints(tmp_path / "run")
    assert steps[0] == 0 and steps[-1] == 3
    final = tmp_path / "run" / "checkpoints" / f"step_{3:08d}"
    assert (final / "model.safetensors").stat().st_size > 0
    assert summary["test_accuracy"] is None or 0 <= summary["test_accuracy"] <= 1


# --- analyses -------------------------------------------------------------------------------

_ANALYSED: dict = {}


def _analysed_run(task: str, model: str, tmp_path_factory):
    """A smoke run of (task, model) with every analysis the model supports run, in registry
    order, at its first trained checkpoint and then at its final one (as `study analyze
    checkpoint=STEP` builds trajectories); per analysis the exception it raised, if any."""
    key = (task, model)
    if key not in _ANALYSED:
        from study.run.analyze import analyze
        from study.run.handle import open_run

        run_dir = tmp_path_factory.mktemp(f"{task}-{model}") / "run"
        _train(task, model, run_dir)
        run, errors = open_run(run_dir), {}
        first, final = list_checkpoints(run_dir)[1], list_checkpoints(run_dir)[-1]
        for name in ANALYSES:
            if not _supports(model, name):
                continue
            try:
                configs = run.analysis_configs((name,), GRID_SETTINGS.get(name))
                for step in (first, final):
                    analyze(run, configs, checkpoint=step)
            except Exception as e:  # reported by that analysis's own test
                errors[name] = e
        _ANALYSED[key] = (run_dir, errors, first, final)
    return _ANALYSED[key]


def _with_pairs(task: str) -> bool:
    return bool(TASKS[task].obj.counterfactual_kinds)


GRID = [(t, m, a) for t in TASKS if _with_pairs(t) for m in MODELS for a in ANALYSES
        if _supports(m, a)]


@pytest.mark.slow  # every analysis on every capable pair
@pytest.mark.parametrize("task,model,analysis", GRID)
def test_every_analysis_runs_on_every_capable_model(task, model, analysis, tmp_path_factory):
    run_dir, errors, first, final = _analysed_run(task, model, tmp_path_factory)
    if analysis in errors:
        raise errors[analysis]
    out = run_dir / "analyses" / analysis
    main = pd.read_parquet(out / f"{analysis}.parquet")  # each analysis has a table of its name
    assert len(main), f"{analysis}.parquet is empty"
    assert {first, final} <= set(main["checkpoint"]), "rows of both analysed checkpoints are kept"
    for path in out.glob("*.parquet"):  # side tables (e.g. head rankings) may be empty where
        pd.read_parquet(path)  # the model has nothing to rank, but they must be readable


REFUSED = [(m, a) for m in MODELS for a in ANALYSES if not _supports(m, a)]


@pytest.mark.parametrize("model,analysis", REFUSED)
def test_an_analysis_the_model_cannot_support_is_refused_at_parse_time(model, analysis):
    task = next(iter(TASKS))
    with pytest.raises(UsageError, match=analysis):
        resolve({"task": task, "model": model, "scale": "smoke", "analyses": analysis})


def test_the_grid_is_read_from_the_registries():
    """Guards the parametrisation itself: every registered name takes part somewhere."""
    assert {t for t, _, _ in GRID} == {t for t in TASKS if _with_pairs(t)}
    assert {m for _, m, _ in GRID} == set(MODELS)
    assert {a for _, _, a in GRID} | {a for _, a in REFUSED} == set(ANALYSES)
