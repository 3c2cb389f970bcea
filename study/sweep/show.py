"""The table of a sweep's runs (run, state, directory, detail), as `status` prints it and as
`sweep ... dry_run=true` prints it before anything runs, with what would be launched."""
from __future__ import annotations

from collections import Counter

from study.run import runstate
from study.sweep.launch import slots
from study.sweep.plan import run_entry
from study.sweep.slurm import describe_submission


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def run_rows(runs) -> tuple[list[str], Counter]:
    """Lines of the table (run, state, directory, detail) and the count of each state.
    `runs`: dicts with task, model, seed, path, analyses and analysis_settings (absent from
    older sweep.json files): a done run whose tables were made with other settings is pending."""
    rows = [("#", "task", "model", "seed", "state", "directory", "")]
    counts: Counter = Counter()
    for i, r in enumerate(runs, 1):
        state = runstate.state_of(r["path"])
        asked = r.get("analysis_settings") or r.get("analyses", ())
        if state == "done" and not runstate.complete(r["path"], asked, r.get("hash")):
            state = "pending"  # finished training, analyses still to run (or another run's folder)
        counts[state] += 1
        rows.append((str(i), r["task"], r["model"], str(r["seed"]), state, str(r["path"]),
                     runstate.detail(r["path"]) if state in ("running", "failed") else ""))
    return _table(rows), counts


def print_plan(plan, options) -> None:
    """`dry_run=true`: the runs, their directories and state, and what would be launched."""
    runs = [{**run_entry(r), "path": str(r.path)} for r in plan.runs]  # as the sweep names it
    lines, counts = run_rows(runs)
    if plan.description:
        print(f"study {plan.name}: {plan.description}")
    print("\n".join(lines))
    print(runstate.summary(counts, len(runs)))
    todo = len(runs) - counts.get("done", 0)
    if options.launcher == "slurm":
        print(describe_submission(plan, options, todo))
    else:
        s = slots(options.jobs, options.gpus, max(1, len(runs)), per_gpu=options.jobs_per_gpu)
        where = (f"GPUs {','.join(s.gpus)} (jobs_per_gpu={s.per_gpu})" if s.gpus else ("this process" if s.in_process else "CPU processes"))
        print(f"would run {todo} of {len(runs)} runs here: {s.jobs} at once on {where}, "
              f"{s.threads} threads each")
    print(f"sweep directory: {plan.sweep_dir}; report: {plan.report_dir / 'index.html'}")
    print("dry run: nothing was run or submitted")
