"""The runs a sweep command line describes (`Plan`: comma lists expanded, every run resolved,
or a study file's sweeps) and its record, `SWEEP_DIR/sweep.json`, which `python -m study status`
reads. The sweep command (`study/sweep/command.py`), its SLURM launcher (`study/sweep/slurm.py`) and the
status command (`study/sweep/status.py`) share these."""
from __future__ import annotations

import hashlib
import json
import itertools
import os
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path

from study.sweep import studies
from study.core import registry
from study.core.coerce import field_types
from study.core.errors import UsageError
from study.core.rundir import atomic_write_json
from study.core.settings import split_args
from study.run.config import RunConfig, resolve
from study.sweep.options import SWEEP_KEYS, SweepOptions, split_options
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
    compare: typing.Any = None  # the CompareConfig of the comparisons at the end (None: defaults)

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
    combos, seen, compared = [], [], []
    for run_kv_all, from_study in sweeps:
        run_kv_all = dict(run_kv_all)
        compared.append({k: run_kv_all.pop(k) for k in list(run_kv_all) if k.startswith("compare.")})
        options, run_kv = split_options(run_kv_all, from_study)
        seen.append(options)
        combos += expand(run_kv)
    if any(o != seen[0] for o in seen) or any(c != compared[0] for c in compared):
        raise UsageError(f"study={study.name}: its parts set different sweep options "
                         f"({', '.join(SWEEP_KEYS)}, compare.*); set them once, under [settings]")
    from study.run.compare import compare_config
    compare = compare_config(compared[0])  # checked before any run starts
    options = seen[0]
    try:
        runs = tuple(Planned(c, resolve(c)) for c in combos)  # every run checked before any starts
    except UsageError as e:
        if str(e).startswith("unknown key"):
            raise UsageError(f"{e}; a sweep also takes {', '.join(SWEEP_KEYS)}, slurm.<field> "
                             f"and compare.<field>") from None
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
    return Plan(runs, sweep_dir, report_dir, name, study.description if study else "",
                compare), options


def _hash(paths) -> str:
    key = "\n".join(sorted(str(Path(p).resolve()) for p in paths))
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def _common_parent(paths) -> Path:
    resolved = [Path(p).resolve() for p in paths]
    parent = Path(os.path.commonpath(resolved))
    return parent.parent if parent in resolved else parent


def record(plan: Plan, launcher: str, jobs: dict) -> Path:
    """Write SWEEP_DIR/sweep.json: the runs, where the report goes and the jobs submitted."""
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    path = plan.sweep_dir / SWEEP_FILE
    atomic_write_json(path, {
        "name": plan.name, "launcher": launcher, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cwd": os.getcwd(), "argv": sys.argv[1:], "report_dir": str(plan.report_dir.resolve()),
        "jobs": jobs,
        "runs": [{**run_entry(r), "args": r.args} for r in plan.runs]})
    return path


def run_entry(run) -> dict:
    """A planned run as `sweep.json` and `status` read it: where it is, what it is, and each
    asked analysis's settings (tables made with other settings are not finished)."""
    return {"path": str(run.path.resolve()), "task": run.cfg.task, "model": run.cfg.model,
            "seed": run.cfg.seed, "hash": run.cfg.hash8(), "analyses": list(run.cfg.analyses),
            "analysis_settings": run.cfg.analysis_settings()}


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
        for i, run in enumerate(data["runs"]):
            if not isinstance(run, dict) or not isinstance(run.get("path"), str):
                raise ValueError(f"run {i} is not an object with a path")
            if not isinstance(run.get("args", []), list):
                raise ValueError(f"run {i}'s args are not a list")
        for key, kind in (("jobs", dict), ("report_dir", str), ("name", str)):
            if data.get(key) is not None and not isinstance(data[key], kind):
                raise ValueError(f"{key} is not a {kind.__name__}")
    except (OSError, ValueError) as e:
        raise UsageError(f"{path} is damaged ({e}); re-run the sweep to rewrite it") from None
    return data
