"""Run one resolved config end to end: run directory → data → training → analyses.

Re-running the same command resumes an interrupted run and skips a finished one (unless
`force=true`); a run directory that holds a *different* config is refused, not overwritten.
"""
from __future__ import annotations

import shutil
import sys
import time

from study.core import registry
from study.config import RunConfig
from study.core.errors import UsageError
from study.core.rundir import RunDir


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare(cfg: RunConfig) -> RunDir:
    """Create (or reopen) the run directory; refuse one that holds another config."""
    rd = RunDir(cfg.path)
    if rd.exists():
        old = rd.config()
        if {k: old.get(k) for k in cfg.identity()} != _jsonable(cfg.identity()):
            if not cfg.force:
                raise UsageError(f"run_dir={rd.path} holds a run with a different config; "
                                 "choose another run_dir or pass force=true to replace it")
            shutil.rmtree(rd.path)
        elif cfg.force and rd.status() == "done":
            shutil.rmtree(rd.path)
    rd.path.mkdir(parents=True, exist_ok=True)
    rd.write_json("config.json", cfg.to_dict())
    if rd.status() is None:
        rd.set_status("created")
    return rd


def _jsonable(obj):
    import json
    return json.loads(json.dumps(obj, default=str))


def build_task(cfg: RunConfig):
    return registry.get("task", cfg.task).obj(cfg.task_config)


def prepare_data(task) -> dict[str, int]:
    """Build (or load from the cache) every split the run uses; returns sizes."""
    names = ["train", *task.eval_splits]
    return {name: len(task.split(name)) for name in dict.fromkeys(names) if name in task.splits}


def run(cfg: RunConfig) -> RunDir:
    rd = prepare(cfg)
    from study.env import environment
    rd.write_json("env.json", environment())
    task = build_task(cfg)
    t0 = time.time()
    sizes = prepare_data(task)
    log(f"data: {', '.join(f'{k} {v:,}' for k, v in sizes.items())} ({time.time() - t0:.1f} s)")
    write_heuristics(rd, task)
    if rd.status() == "done":
        log(f"{rd.path}: already finished (force=true retrains)")
    else:
        rd.set_status("running")
        try:
            _train(cfg, rd, task)
        except KeyboardInterrupt:
            rd.set_status("failed", error="interrupted; re-run the same command to resume")
            raise
        except BaseException as e:
            rd.set_status("failed", error=f"{type(e).__name__}: {e}")
            raise
    _analyses(cfg, rd)
    rd.set_status("done")
    write_report(rd)
    return rd


def write_heuristics(rd: RunDir, task) -> None:
    """`heuristics.parquet`: the task's shortcut rules scored on its test split, for reports."""
    if (rd.path / "heuristics.parquet").exists():
        return
    rows = task.heuristics("test")
    if rows:
        import pandas as pd
        df = pd.DataFrame(rows).astype({"stratum": str, "value": str})
        rd.write_parquet("heuristics.parquet", df)


def write_report(rd: RunDir) -> None:
    from reports.write import write_run_report
    log(f"report: {write_run_report(rd.path)}")


def _train(cfg: RunConfig, rd: RunDir, task) -> None:
    from study.train.loop import train
    model_entry = registry.get("model", cfg.model)
    summary = train(rd, task, model_entry, cfg.model_config, cfg.train, cfg.seed)
    acc = summary.get("test_accuracy")
    log(f"trained {cfg.model} on {cfg.task}: " + (f"test accuracy {acc:.4f}" if acc is not None else "done"))


def _analyses(cfg: RunConfig, rd: RunDir) -> None:
    """Run the requested analyses that have no tables yet (a re-run skips finished ones)."""
    todo = tuple(n for n in cfg.analyses if not any(rd.analysis_dir(n).glob("*.parquet")))
    if todo:
        from study.analyze import analyze
        analyze(rd, {n: cfg.analysis_configs[n] for n in todo})
