"""`python -m study status SWEEP`: where each run of a sweep stands (done / running / failed /
interrupted / pending), read from the run directories, with the SLURM jobs of a sweep that was
submitted (`squeue`). SWEEP is a sweep directory (holding `sweep.json`), a study's name or
file, or the sweep's own key=value settings. `sweep ... dry_run=true` prints the same table
before anything runs, with what would be submitted."""
from __future__ import annotations

from pathlib import Path

from study.run import runstate
from study.sweep.show import run_rows
from study.sweep.slurm import job_states
from study.sweep.plan import find_sweep


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
