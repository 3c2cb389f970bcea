"""Finding where a run resumes from, and refusing to resume a different run.

A run directory's checkpoints record the model, task, seed and training settings they came
from (`meta.json`); continuing them under other settings would silently mix two runs. Only
the settings of how a run executes (`TrainConfig`'s `runtime=True` fields: device, time budgets, which states to
keep) may change between sessions.

The newest training state is normally the resume point. One found unreadable (its state.pt,
weights or meta.json) is set aside as `NAME.damaged` with a one-line notice and the previous
state, which checkpoint.save keeps for this, is used instead: the run loses the steps in
between, which it trains again to the same result.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from study.core.damage import set_aside
from study.core.rundir import RunDir, jsonable
from study.train import checkpoint as ckpt
from study.core.settings import without_runtime
from study.train.config import TrainConfig
from study.train.state import TrainState

_log = logging.getLogger(__name__)


def run_meta(task, model_entry, model_cfg, train_cfg: TrainConfig, seed: int) -> dict:
    """What every checkpoint's meta.json says about the run (enough to rebuild the network)."""
    plain = lambda cfg: jsonable(dataclasses.asdict(cfg))  # noqa: E731
    return {"model": model_entry.name, "model_config": plain(model_cfg), "task": task.name,
            "task_config": plain(task.config), "train_config": plain(train_cfg),
            "seed": seed, "vocab_size": len(task.vocab), "seq_len": task.seq_len}


def check_same_run(old: dict, new: dict, where) -> None:
    """Raise CheckpointError naming the first setting (and its fields) that differs."""
    for key in ("model", "model_config", "task", "task_config", "seed", "train_config"):
        a, b = old.get(key), new.get(key)
        if key == "train_config":
            a, b = without_runtime(TrainConfig, a or {}), without_runtime(TrainConfig, b)
        if a != b:
            diff = ([k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
                    if isinstance(a, dict) and isinstance(b, dict) else [])
            raise ckpt.CheckpointError(
                f"{where} was trained with a different {key}"
                f"{' (' + ', '.join(diff) + ')' if diff else ''}; use a new run directory or force")


def resume_from(run: RunDir, meta: dict) -> tuple[Path | None, TrainState]:
    """(checkpoint directory to continue from, its training state), or (None, a fresh state)
    for a new run; checked to belong to the run described by `meta`. Leftovers of interrupted
    checkpoint writes are removed; an unreadable newest state falls back to the previous one."""
    ckpt.clean_temporaries(run)
    candidates = [p for _, p in reversed(ckpt.state_dirs(run))]
    if not candidates:
        if ckpt.list_checkpoints(run):
            raise ckpt.CheckpointError(
                f"{ckpt.checkpoints_dir(run)} holds checkpoints but none with a training state "
                f"({ckpt.STATE}); cannot resume: re-run with force")
        return None, TrainState()
    damaged: list[str] = []
    for found in candidates:
        try:
            saved = ckpt.read_meta(found)
        except ckpt.CheckpointError as e:
            damaged.append(_set_aside(found, ckpt.META, e))
            continue
        check_same_run(saved, meta, found)  # another run's state is an error, not damage
        try:
            ckpt.check_weights(found)
        except ckpt.CheckpointError as e:
            damaged.append(_set_aside(found, ckpt.WEIGHTS, e))
            continue
        try:
            state = TrainState.load(found)
        except ckpt.CheckpointError as e:
            damaged.append(_set_aside(found, ckpt.STATE, e))
            continue
        for line in damaged:
            _log.info(f"notice: {line}; resuming from the previous training state, step {state.step} "
                      f"({found.name})")
        return found, state
    raise ckpt.CheckpointError(
        f"no readable training state is left in {ckpt.checkpoints_dir(run)} ({'; '.join(damaged)}); "
        f"re-run with force=true to train afresh")


def _set_aside(found: Path, name: str, err: ckpt.CheckpointError) -> str:
    """Move the unreadable file, and the state that needs it, out of the way (NAME.damaged,
    kept for inspection); the directory is no longer a resume point. Returns what happened."""
    reason = getattr(err, "reason", str(err))
    moved = set_aside(found / name) if (found / name).exists() else None
    if name != ckpt.STATE and (found / ckpt.STATE).exists():
        set_aside(found / ckpt.STATE)  # a state without its weights or meta cannot resume
    what = f"moved it to {moved.name}" if moved is not None else "it is missing"
    return f"{found / name} is unreadable ({reason}); {what}"
