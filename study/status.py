"""`python -m study status SWEEP`: where each run of a sweep stands (done / running / failed /
interrupted / pending), read from the run directories, with the SLURM jobs of a sweep that was
submitted (`squeue`). SWEEP is a sweep directory (holding `sweep.json`), a study's name or
file, or the sweep's own key=value settings. `sweep ... dry_run=true` prints the same table
before anything runs, with what would be submitted."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from study import runstate
from study.core.errors import UsageError
from study.launch import slots
from study.slurm import describe_submission, job_states
from study.sweep_plan import SWEEP_FILE, parse, run_entry


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
        s = slots(options.jobs, options.gpus, max(1, len(runs)))
        where = f"GPUs {','.join(s.gpus)}" if s.gpus else ("this process" if s.in_process else "CPU processes")
        print(f"would run {todo} of {len(runs)} runs here: {s.jobs} at once on {where}, "
              f"{s.threads} threads each")
    print(f"sweep directory: {plan.sweep_dir}; report: {plan.report_dir / 'index.html'}")
    print("dry run: nothing was run or submitted")


def find_sweep(args: list[str]) -> tuple[dict, Path | None]:
    """(the sweep's record, its sweep.json) from `status`'s arguments: a sweep directory gives
    its record as written; a study or settings give the runs they plan now (with the asked
    analysis settings) and, where that sweep was recorded, its jobs and report."""
    if len(args) == 1 and "=" not in args[0]:
        ref = args[0]
        candidate = Path(ref)
        if candidate.is_dir():
            path = candidate / SWEEP_FILE
            if not path.is_file():
                raise UsageError(f"{ref} holds no {SWEEP_FILE}: not a sweep directory")
            return _read(path), path
        args = [f"study={ref}"]
    if not args:
        raise UsageError("usage: status SWEEP_DIR | STUDY | key=value ... (the sweep's settings)")
    plan, _ = parse(args)
    runs = [run_entry(r) for r in plan.runs]  # as asked now: settings may differ from the record's
    path = plan.sweep_dir / SWEEP_FILE
    if path.is_file():
        return {**_read(path), "runs": runs}, path
    return {"name": plan.name, "runs": runs, "jobs": {}, "report_dir": str(plan.report_dir)}, None


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise ValueError("no list of runs")
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} is damaged ({e}); re-run the sweep to rewrite it") from None
    return data


def cmd_status(args):
    record, path = find_sweep(args)
    lines, counts = run_rows(record["runs"])
    print("\n".join(lines))
    print(runstate.summary(counts, len(record["runs"])))
    jobs = record.get("jobs") or {}
    if jobs:
        states = job_states([j for j in (jobs.get("array"), jobs.get("report")) if j])
        if states is None:
            print("slurm: squeue did not answer; the jobs' states are unknown")
            states = {}
        for what in ("array", "report"):
            if jobs.get(what):
                shown = ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.get(jobs[what], {}).items()))
                print(f"slurm {what} job {jobs[what]}: {shown or 'no longer queued'}")
    report = Path(record.get("report_dir", "")) / "index.html"
    print(f"report: {report}" + ("" if report.is_file() else " (not written yet)"))
    return 0
