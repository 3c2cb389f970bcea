"""Finding where a run resumes from, and refusing to resume a different run.

A run directory's checkpoints record the model, task, seed and training settings they came
from (`meta.json`); continuing them under other settings would silently mix two runs. Only
the settings of how a run executes (device, precision, ...) may change between sessions."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from study.core.rundir import RunDir
from study.train import checkpoint as ckpt
from study.train.config import TrainConfig

# settings that may change between an interrupted run and its resumption
RUNTIME_FIELDS = ("device", "precision", "compile", "resume_minutes", "keep_state")


def _jsonable(obj) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(obj), default=str))


def run_meta(task, model_entry, model_cfg, train_cfg: TrainConfig, seed: int) -> dict:
    """What every checkpoint's meta.json says about the run (enough to rebuild the network)."""
    return {"model": model_entry.name, "model_config": _jsonable(model_cfg), "task": task.name,
            "task_config": _jsonable(task.config), "train_config": _jsonable(train_cfg),
            "seed": seed, "vocab_size": len(task.vocab), "seq_len": task.seq_len}


def check_same_run(old: dict, new: dict, where) -> None:
    """Raise CheckpointError naming the first setting (and its fields) that differs."""
    for key in ("model", "model_config", "task", "task_config", "seed", "train_config"):
        a, b = old.get(key), new.get(key)
        if key == "train_config":
            a = {k: v for k, v in (a or {}).items() if k not in RUNTIME_FIELDS}
            b = {k: v for k, v in b.items() if k not in RUNTIME_FIELDS}
        if a != b:
            diff = ([k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
                    if isinstance(a, dict) and isinstance(b, dict) else [])
            raise ckpt.CheckpointError(
                f"{where} was trained with a different {key}"
                f"{' (' + ', '.join(diff) + ')' if diff else ''}; use a new run directory or force")


def resume_point(run: RunDir, meta: dict) -> Path | None:
    """The checkpoint directory to continue from (None: start afresh), checked to belong to
    the run described by `meta`. Leftovers of interrupted checkpoint writes are removed."""
    ckpt.clean_temporaries(run)
    found = ckpt.latest(run)
    if found is None and ckpt.list_checkpoints(run):
        raise ckpt.CheckpointError(f"{ckpt.checkpoints_dir(run)} holds checkpoints but none with a "
                                   f"training state ({ckpt.STATE}); cannot resume: re-run with force")
    if found is not None:
        check_same_run(ckpt.read_meta(found), meta, found)
    return found
