"""The `grid` item of `python -m study gpu-check`: every registered task with every model
family and each analysis its capabilities allow, at scale=smoke, in one process:
`python -m study.checks.gpu_check_grid device=cuda|cpu quick=true|false work=DIR`."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from study.core.coerce import coerce
from study.core.errors import UsageError
from study.core.settings import split_args
from study.checks.gpu_check import QUICK_ANALYSES, QUICK_TRAIN, _short


def grid_combos(quick: bool) -> list[tuple[str, str, tuple[str, ...]]]:
    """(task, model, analyses): every registered task with every model family, each with the
    analyses its capabilities allow (the check `study run` makes at parse time). Quick: each
    family on one task, the tasks in turn, which still covers every task and analysis."""
    from study.core import registry
    tasks = list(registry.entries("task"))
    models = registry.entries("model")
    combos = []
    for i, (model, entry) in enumerate(models.items()):
        for task in ([tasks[i % len(tasks)]] if quick else tasks):
            combos.append((task, model, _applicable(entry)))
    return sorted(combos)


def _applicable(model_entry) -> tuple[str, ...]:
    """The analyses the model's capabilities allow, by `study run`'s own parse-time check."""
    from study.run.config import check_analyses
    from study.core import registry

    def allowed(name: str) -> bool:
        try:
            check_analyses((name,), model_entry)
        except UsageError:
            return False
        return True
    return tuple(name for name in registry.entries("analysis") if allowed(name))


def grid_settings(task: str, model: str, analyses, device: str, quick: bool, work: Path) -> dict:
    """The `study run` settings of one grid combination."""
    from study.core import registry
    kv = {"task": task, "model": model, "scale": "smoke", "runtime.device": device,
          # eager: compiling every network of the grid would take most of the check's
          # minutes; the compiled engine is exercised by doctor, bench-train and the paper runs
          "train.compile": "off", "analyses": ",".join(analyses),
          "run_dir": str(work / f"{task}-{model}")}
    if quick:
        kv.update(QUICK_TRAIN)
        for name in analyses:
            kv.update({f"{name}.{k}": v for k, v in QUICK_ANALYSES.get(name, {}).items()})
        # one variable each (the task's first) instead of every one the task declares
        task_cls = registry.get("task", task).obj
        if "das" in analyses and task_cls.causal_variables:
            kv["das.variables"] = task_cls.causal_variables[0]
        if "probes" in analyses and task_cls.probe_variable_names:
            kv["probes.variables"] = task_cls.probe_variable_names[0]
    elif "probes" in analyses:
        kv["runtime.probe_jobs"] = "-1"  # the probes' fits run on the CPU: every core
    return kv


def grid_main(args: list[str]) -> int:
    """`python -m study.checks.gpu_check_grid device=D quick=B work=DIR`: one line per combination,
    every combination tried; the last line names the failed ones (exit status 1)."""
    import traceback

    from study.run.config import resolve
    from study.core.logs import to_terminal
    from study.run.runner import run
    to_terminal()  # the runs' lines in the check's log, as the command line shows them
    kv = split_args(args)
    device, work = kv.get("device", "cuda"), Path(kv["work"])
    quick = coerce("quick", kv.get("quick", "false"), bool)
    combos = grid_combos(quick)
    failed = []
    for task, model, analyses in combos:
        t0 = time.perf_counter()
        print(f"grid: {task} × {model}, analyses {', '.join(analyses) or 'none'}", flush=True)
        try:
            run(resolve(grid_settings(task, model, analyses, device, quick, work)))
        except Exception as e:  # noqa: BLE001 - one combination failing must not hide the others
            traceback.print_exc()
            failed.append(f"{task} × {model} ({type(e).__name__}: {_short(str(e), 160)})")
            print(f"grid: {task} × {model} FAILED after {time.perf_counter() - t0:.1f} s",
                  flush=True)
            continue
        print(f"grid: {task} × {model} passed in {time.perf_counter() - t0:.1f} s", flush=True)
    sys.stderr.flush()
    if failed:
        print(f"error: {len(failed)} of {len(combos)} grid runs failed: {'; '.join(failed)}",
              flush=True)
        return 1
    print(f"grid: all {len(combos)} runs passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(grid_main(sys.argv[1:]))
