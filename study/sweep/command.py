"""`study sweep`: expand comma lists into runs and run them, on this machine
(`launcher=local`, `study/sweep/launch.py`) or on a SLURM cluster (`launcher=slurm`,
`study/sweep/slurm.py`); finished runs are skipped, interrupted ones resume. `study=NAME|PATH` names
a study file (`study/sweep/studies.py`); `dry_run=true` lists the runs and submits nothing.

Every run is resolved (and so checked) before any is started. The sweep records its runs in
`SWEEP_DIR/sweep.json` (`runs/study-NAME/` for a study, `sweep-<hash8>/` beside the runs
otherwise), which `python -m study status` reads. It ends with the comparisons across its
runs (`study/run/compare.py`: tables under `<report dir>/comparisons/` and each run's
`analyses/compare/`) and the comparative report of those that finished
(`runs/study-NAME/index.html` for a study), and prints the run directories and the report's
path; runs that failed are listed then, and the exit status is 2. The plan and its record
live in `study/sweep/plan.py`, the comparisons and report at the end in `study/sweep/finish.py`.

A local sweep whose runs would work on this CPU for over an hour in all (training and
analyses as the launcher schedules them, `jobs` at once, then the comparisons) is refused in one line before anything is written, as `run`
refuses one such run; `long=ok` starts it anyway (`study/run/estimate.py`). A dry run shows the
plan, then the same refusal. SLURM and GPU launches are not held back.
"""
from __future__ import annotations

import logging
import sys

from study.core.errors import UsageError
from study.sweep.finish import finish, prepare_finish
from study.sweep.plan import parse, record

_log = logging.getLogger(__name__)


def cmd_sweep(args):
    plan, options = parse(args)
    if options.dry_run:
        from study.sweep.show import print_plan
        print_plan(plan, options)
        sys.stdout.flush()
        if options.launcher == "local":  # what starting it would meet
            _check_duration(plan, options)
        return 0
    if options.launcher == "slurm":
        from study.sweep.slurm import submit_sweep
        return submit_sweep(plan, options)
    from study.sweep.launch import run_local
    slots_ = _check_duration(plan, options)  # before anything is written
    record(plan, "local", {})
    if not slots_.in_process:
        gpus = (f" on GPUs {','.join(slots_.gpus)} (jobs_per_gpu={slots_.per_gpu})"
                if slots_.gpus else "")
        _log.info(f"sweep: {len(plan.runs)} runs, {slots_.jobs} at once{gpus}, "
                  f"{slots_.threads} threads each")
    outcome = run_local(plan.runs, slots_, warm=prepare_finish)
    done = [p for p in plan.paths if p in set(outcome.done)]
    report = finish(done, plan.report_dir, plan.compare) if done else None
    for path in done:
        print(path)
    if report is not None:
        print(f"report: {report}")
    sys.stdout.flush()
    if outcome.failed:
        raise UsageError(f"{len(outcome.failed)} of {len(plan.runs)} runs failed: "
                         + "; ".join(f"{p} ({why})" for p, why in outcome.failed)
                         + "; re-run the sweep to resume them")
    return 0


def _check_duration(plan, options):
    """Refuse a local sweep whose CPU runs would work (train, analyse, compare) for over an
    hour here, unless long=ok (finished runs count nothing, resumed ones only the steps
    left); returns the launcher's slots."""
    from study.run import runstate
    from study.run.build import build_task
    from study.run.estimate import SweepRun, check_long, on_cpu, steps_left
    from study.run.preflight import nvidia_driver_loaded
    from study.sweep.launch import slots

    slots_ = slots(options.jobs, options.gpus, len(plan.runs), per_gpu=options.jobs_per_gpu)
    if options.long:
        return slots_
    gpus_here = bool(slots_.gpus) or nvidia_driver_loaded()
    todo = []
    for r in plan.runs:
        cfg = r.cfg
        if not on_cpu(cfg, gpus_here):
            continue  # a GPU run is not held back
        if not cfg.force and runstate.complete(r.path, cfg.analysis_settings(), cfg.hash8()):
            continue
        try:
            left = steps_left(cfg, r.path, cfg.force)
        except OSError:  # a folder the launcher refuses in its own line
            left = cfg.train.steps
        todo.append(SweepRun(f"{cfg.task} × {cfg.model} seed {cfg.seed}", cfg, build_task(cfg), left))
    check_long(todo, slots_.jobs, slots_.threads, allow_long=False, compare=plan.compare)
    return slots_
