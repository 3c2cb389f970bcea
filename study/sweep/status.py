"""`python -m study status SWEEP`: where each run of a sweep stands (done / running / failed /
interrupted / pending), read from the run directories, with the SLURM jobs of a sweep that was
submitted (`squeue`). SWEEP is a sweep directory (holding `sweep.json`), a study's name or
file, or the sweep's own key=value settings. `sweep ... dry_run=true` prints the same table
before anything runs, with what would be submitted."""
from __future__ import annotations

import json
from pathlib import Path

from study.run import runstate
from study.core.errors import UsageError
from study.sweep.show import run_rows
from study.sweep.slurm import job_states
from study.sweep.plan import SWEEP_FILE, parse, run_entry


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
