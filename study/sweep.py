"""`study sweep`: expand comma lists into runs and run them one after another (a local
launcher); finished runs are skipped, interrupted ones resume. `study=NAME` names a
predefined comparative study; the sweep prints the directories of its runs."""
from __future__ import annotations

import itertools
import sys
import typing

from study import registry
from study.coerce import field_types
from study.config import resolve, split_args
from study.errors import UsageError
from study.train_config import TrainConfig

# Predefined studies: key=value defaults (comma lists sweep), overridable on the command line.
STUDIES = {
    "demo": {  # the README's first command: one small run with analyses, minutes on a 2-core CPU
        "task": "counting", "model": "gru", "scale": "small", "analyses": "patching,probes",
    },
    "counting": {  # the counting study's comparison across architectures
        "task": "counting", "model": "gru,lstm,rope2", "scale": "small",
        "analyses": "patching,das,probes",
    },
}
NEVER_EXPANDED = {"analyses", "run_dir"}


def _is_tuple_field(key: str, task: str, model: str) -> bool:
    group, _, name = key.partition(".")
    cls = {"task": lambda: registry.get("task", task).config,
           "model": lambda: registry.get("model", model).config,
           "train": lambda: TrainConfig}.get(group)
    if cls is None or not name:
        return False
    tp = field_types(cls()).get(name)
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
    if "study" in kv:
        name = kv.pop("study")
        if name not in STUDIES:
            raise UsageError(f"study={name!r} is not a predefined study; choose from {', '.join(STUDIES)}")
        kv = {**STUDIES[name], **kv}
    configs = [resolve(combo) for combo in expand(kv)]  # every combination is checked before any runs
    from study.runner import log, run
    done = []
    for i, cfg in enumerate(configs, 1):
        log(f"[{i}/{len(configs)}] {cfg.task} × {cfg.model} seed {cfg.seed} → {cfg.path}")
        done.append(run(cfg))
    for rd in done:
        print(rd.path)
    sys.stdout.flush()
