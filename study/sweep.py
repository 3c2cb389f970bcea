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
path; runs that failed are listed then, and the exit status is 2.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path

from study import studies
from study.core import registry
from study.core.coerce import field_types
from study.core.errors import UsageError
from study.core.rundir import atomic_write_json
from study.core.settings import split_args
from study.config import RunConfig, resolve
from study.sweep_options import SWEEP_KEYS, SweepOptions, split_options
from study.train.config import TrainConfig

NEVER_EXPANDED = {"analyses", "run_dir"}
SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class Planned:
    """One run of a sweep: its key=value pairs (as `study run` takes them) and its config."""
    combo: dict[str, str]
    cfg: RunConfig

    @property
    def path(self) -> Path:
        return Path(self.cfg.path)

    @property
    def args(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.combo.items()]


@dataclass(frozen=True)
class Plan:
    runs: tuple[Planned, ...]
    sweep_dir: Path  # sweep.json, SLURM's logs
    report_dir: Path  # the comparative report
    name: str  # the study's name, or the sweep directory's
    description: str = ""  # the study's

    @property
    def paths(self) -> list[Path]:
        return [r.path for r in self.runs]


def _is_tuple_field(key: str, task: str, model: str) -> bool:
    group, _, name = key.partition(".")
    if not name:
        return False
    if group in ("task", "model"):
        cls = registry.get(group, task if group == "task" else model).config
    elif group == "train":
        cls = TrainConfig
    elif group in registry.entries("analysis"):
        cls = registry.get("analysis", group).config
    else:
        return False
    tp = field_types(cls).get(name)
    return typing.get_origin(tp) is tuple


def expand(kv: dict[str, str]) -> list[dict[str, str]]:
    """Cartesian product over comma-separated values (tuple-typed fields keep their commas)."""
    if "run_dir" in kv:
        raise UsageError("run_dir= cannot be given to a sweep (each run gets its own directory)")
    combos = []
    for task in kv.get("task", "").split(","):
        for model in kv.get("model", "").split(","):
            fixed = {**kv, "task": task, "model": model}
            axes = {k: v.split(",") for k, v in fixed.items()
                    if k not in NEVER_EXPANDED and "," in v and not _is_tuple_field(k, task, model)}
            for values in itertools.product(*axes.values()):
                combos.append({**fixed, **dict(zip(axes, values))})
    return combos


def parse(args: list[str]) -> tuple[Plan, SweepOptions]:
    """The sweep a command line describes, every run resolved and every option checked."""
    kv = split_args(args)
    study = None
    sweeps: list[tuple[dict[str, str], frozenset[str]]] = [(kv, frozenset())]
    if "study" in kv:
        study = studies.load(kv.pop("study"))
        sweeps = [({**settings, **kv}, frozenset(k for k in settings if k not in kv))
                  for settings in study.sweeps()]
    combos, seen = [], []
    for run_kv_all, from_study in sweeps:
        options, run_kv = split_options(run_kv_all, from_study)
        seen.append(options)
        combos += expand(run_kv)
    if any(o != seen[0] for o in seen):
        raise UsageError(f"study={study.name}: its parts set different sweep options "
                         f"({', '.join(SWEEP_KEYS)}); set them once, under [settings]")
    options = seen[0]
    try:
        runs = tuple(Planned(c, resolve(c)) for c in combos)  # every run checked before any starts
    except UsageError as e:
        if str(e).startswith("unknown key"):
            raise UsageError(f"{e}; a sweep also takes {', '.join(SWEEP_KEYS)} and slurm.<field>") from None
        raise
    paths = [r.path for r in runs]
    dupes = {p for p in paths if paths.count(p) > 1}
    if dupes:
        raise UsageError(f"the sweep names the run {sorted(dupes)[0]} more than once; "
                         f"remove the repeated value")
    if study is not None:
        sweep_dir = report_dir = Path(study.report_dir)
        name = study.name
    else:
        from study.reports.write import default_out
        sweep_dir = _common_parent(paths) / f"sweep-{_hash(paths)}"
        report_dir = Path(default_out(paths))
        name = sweep_dir.name
    return Plan(runs, sweep_dir, report_dir, name, study.description if study else ""), options


def _hash(paths) -> str:
    key = "\n".join(sorted(str(Path(p).resolve()) for p in paths))
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def _common_parent(paths) -> Path:
    resolved = [Path(p).resolve() for p in paths]
    parent = Path(os.path.commonpath(resolved))
    return parent.parent if parent in resolved else parent


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


def record(plan: Plan, launcher: str, jobs: dict) -> Path:
    """Write SWEEP_DIR/sweep.json: the runs, where the report goes and the jobs submitted."""
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    path = plan.sweep_dir / SWEEP_FILE
    atomic_write_json(path, {
        "name": plan.name, "launcher": launcher, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cwd": os.getcwd(), "report_dir": str(plan.report_dir.resolve()), "jobs": jobs,
        "runs": [{"path": str(r.path.resolve()), "args": r.args, "task": r.cfg.task,
                  "model": r.cfg.model, "seed": r.cfg.seed, "hash": r.cfg.hash8(),
                  "analyses": list(r.cfg.analyses)}
                 for r in plan.runs]})
    return path


def finish(paths, out) -> Path:
    """The comparisons across the finished runs, then their comparative report."""
    from study.reports.write import write_report
    compare_end(paths, out)
    return write_report(paths, out)


def compare_end(paths, out) -> None:
    """The sweep's comparisons across its runs (`study compare`), when at least two runs of
    a task saved das alignments; a failure is reported and the report written without them."""
    from study.runner import log
    with_das = [p for p in paths if any((Path(p) / "analyses" / "das").glob("alignments*.safetensors"))]
    if len(with_das) < 2:
        return
    from study.compare import compare_runs
    log(f"comparing {len(with_das)} runs across architectures → {Path(out) / 'comparisons'}")
    try:
        compare_runs(with_das, out)
    except (UsageError, ValueError, RuntimeError) as e:
        print(f"warning: comparisons across runs skipped: {e}", file=sys.stderr)
