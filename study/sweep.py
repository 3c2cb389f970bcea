"""`study sweep`: expand comma lists into runs and run them, on this machine
(`launcher=local`, `study/launch.py`) or on a SLURM cluster (`launcher=slurm`,
`study/slurm.py`); finished runs are skipped, interrupted ones resume. `study=NAME|PATH` names
a study file (`study/studies.py`); `dry_run=true` lists the runs and submits nothing.

Every run is resolved (and so checked) before any is started. The sweep records its runs in
`SWEEP_DIR/sweep.json` (`runs/study-NAME/` for a study, `sweep-<hash8>/` beside the runs
otherwise), which `python -m study status` reads. It ends with the comparisons across its
runs (`study/compare.py`: tables under `<report dir>/comparisons/` and each run's
`analyses/compare/`) and the comparative report of those that finished
(`runs/study-NAME/index.html` for a study), and prints the run directories and the report's
path; runs that failed are listed then, and the exit status is 2. The plan and its record
live in `study/sweep_plan.py`, the comparisons and report at the end in `study/sweep_finish.py`.
"""
from __future__ import annotations

import sys

from study.core.errors import UsageError
from study.sweep_finish import finish
from study.sweep_plan import parse, record


def cmd_sweep(args):
    plan, options = parse(args)
    if options.dry_run:
        from study.status import print_plan
        print_plan(plan, options)
        return 0
    if options.launcher == "slurm":
        from study.slurm import submit_sweep
        return submit_sweep(plan, options)
    from study.launch import run_local, slots
    from study.runner import log
    slots_ = slots(options.jobs, options.gpus, len(plan.runs))
    record(plan, "local", {})
    if not slots_.in_process:
        gpus = f" on GPUs {','.join(slots_.gpus)}" if slots_.gpus else ""
        log(f"sweep: {len(plan.runs)} runs, {slots_.jobs} at once{gpus}, "
            f"{slots_.threads} threads each")
    outcome = run_local(plan.runs, slots_)
    done = [p for p in plan.paths if p in set(outcome.done)]
    report = finish(done, plan.report_dir) if done else None
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
