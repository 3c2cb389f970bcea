"""`study sweep`: expand comma lists into runs and run them one after another (a local
launcher); finished runs are skipped, interrupted ones resume. `study=NAME` names a
predefined comparative study. The sweep ends with the comparative report of its runs
(`runs/study-NAME/index.html` for a named study) and prints the run directories and the
report's path. Before the report, the runs' DAS subspaces are compared across architectures
(`study/compare.py`: tables under `<report dir>/comparisons/` and each run's
`analyses/compare/`), so the report draws them."""
from __future__ import annotations

import itertools
import sys
import typing

from study.core import registry
from study.core.coerce import field_types
from study.config import resolve
from study.core.settings import split_args
from study.core.errors import UsageError
from study.train.config import TrainConfig

# Predefined studies: key=value defaults (comma lists sweep), overridable on the command line.
STUDIES = {
    "demo": {  # the README's first command: a small comparative study, minutes on a 2-core CPU
        "task": "counting", "model": "gru,lstm,rope2", "scale": "small",
        "analyses": "patching,das,probes",
        # [ours] DAS on the Up-Down model's count, the counting study's headline variable;
        # each model trains for at most 2.5 minutes, so the study fits in 10 on two cores
        "das.variables": "up_down:count", "das.alignments": "oaf,laf,random",
        # one restart and k up to 4: the search also runs on the step-0 network (the control)
        "das.restarts": "1", "das.k": "1,2,4",
        "train.max_minutes": "2.5", "probes.n_examples": "500",
        "probes.variables": "up_down:count,up_down:phase",
    },
    "counting": {  # the counting study's comparison across architectures, three seeds
        "task": "counting", "model": "gru,lstm,rope2", "scale": "small", "seed": "0,1,2",
        "analyses": "patching,das,probes",
        # [ours] DAS on the Up-Down count (the variable the comparison reads) with one restart
        # per k, so that the trained and step-0 searches of nine runs fit an hour on two cores
        "das.variables": "up_down:count", "das.restarts": "1",
    },
}
NEVER_EXPANDED = {"analyses", "run_dir"}


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


def cmd_sweep(args):
    kv = split_args(args)
    jobs_text = kv.pop("jobs", "1")
    report_dir = None
    if "study" in kv:
        name = kv.pop("study")
        if name not in STUDIES:
            raise UsageError(f"study={name!r} is not a predefined study; choose from {', '.join(STUDIES)}")
        kv = {**STUDIES[name], **kv}
        report_dir = f"runs/study-{name}"
    combos = expand(kv)
    configs = [resolve(combo) for combo in combos]  # every combination is checked before any runs
    jobs = parse_jobs(jobs_text, len(configs))
    if jobs > 1:
        from study.launch import run_parallel
        paths = run_parallel(combos, configs, jobs)
    else:
        from study.runner import log, run
        paths = []
        for i, cfg in enumerate(configs, 1):
            log(f"[{i}/{len(configs)}] {cfg.task} × {cfg.model} seed {cfg.seed} → {cfg.path}")
            paths.append(run(cfg).path)
    from reports.write import default_out, write_report
    out = report_dir or default_out(paths)
    compare_end(paths, out)
    report = write_report(paths, out)
    for path in paths:
        print(path)
    print(f"report: {report}")
    sys.stdout.flush()


def compare_end(paths, out) -> None:
    """The sweep's comparisons across its runs (`study compare`), when at least two runs of
    a task saved das alignments; a failure is reported and the report written without them."""
    from pathlib import Path

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


def parse_jobs(text: str, n_runs: int) -> int:
    """`jobs=N` runs at once (default 1: one small model trains faster on all the cores than
    two share them); `jobs=auto`: one per CPU core on a CPU-only machine, 1 with a GPU."""
    if text == "auto":
        import torch

        from study.launch import cores
        return 1 if torch.cuda.is_available() else max(1, min(n_runs, cores()))
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise UsageError(f"jobs={text!r}: expected auto or a whole number >= 1")
    return min(jobs, n_runs)
