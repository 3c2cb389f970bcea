"""Checkpoints of a run: saving them atomically, finding them, loading them without pickle.

Layout under `<run>/checkpoints/`:

    step_00001234/      weights after 1234 optimiser updates (step_00000000 = untrained)
      model.safetensors   the weights
      meta.json           model + config, task + config, train config, step, seed: enough to
                          rebuild the network with nothing else at hand
      state.pt            training state (optimiser, RNG, counters) -- kept in the two newest
                          checkpoints or resume points unless `runtime.keep_state=all`
    resume_00001300/    a rolling resume point between logged checkpoints (same files)

A checkpoint directory is written under a temporary name, fsynced and renamed into place, so a
crash never leaves a half-written one. The state before the newest is kept as well, and older
ones are deleted only once the new one is durable: a newest state found damaged later (a bad
disk, a broken copy) costs the steps since the previous one, not the run
(`study/train/resume.py`). Anything unreadable raises `CheckpointError` naming the file;
nothing ever silently restarts a run from zero.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from study.core.atomic import atomic_dir, remove_temporaries, usual_mode
from study.core.errors import UsageError

STEP_PREFIX = "step_"
RESUME_PREFIX = "resume_"
WEIGHTS, META, STATE = "model.safetensors", "meta.json", "state.pt"
FORMAT = 1


class CheckpointError(UsageError):
    """A checkpoint is missing, truncated or inconsistent with the run's configuration."""


def checkpoints_dir(run_dir) -> Path:
    return Path(getattr(run_dir, "path", run_dir)) / "checkpoints"


def dir_name(step: int, resume: bool = False) -> str:
    return f"{RESUME_PREFIX if resume else STEP_PREFIX}{step:08d}"


def _step_of(path: Path) -> int | None:
    for prefix in (STEP_PREFIX, RESUME_PREFIX):
        if path.name.startswith(prefix) and path.name[len(prefix):].isdigit():
            return int(path.name[len(prefix):])
    return None


def list_checkpoints(run_dir) -> list[int]:
    """Steps of the logged checkpoints (not resume points), ascending."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    return sorted(_step_of(p) for p in root.iterdir()
                  if p.is_dir() and p.name.startswith(STEP_PREFIX) and _step_of(p) is not None)


def state_dirs(run_dir) -> list[tuple[int, Path]]:
    """(step, directory) of every checkpoint or resume point holding a training state, oldest
    first."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = [(_step_of(p), p) for p in root.iterdir()
             if p.is_dir() and _step_of(p) is not None and (p / STATE).exists()]
    # at equal steps a logged checkpoint wins over a resume point
    return sorted(found, key=lambda sp: (sp[0], sp[1].name.startswith(STEP_PREFIX)))


def latest(run_dir) -> Path | None:
    """The newest checkpoint directory holding a full training state (the resume point), or
    None when the run has none."""
    found = state_dirs(run_dir)
    return found[-1][1] if found else None


# --- writing -------------------------------------------------------------------------------

def save(run_dir, step: int, model, meta: dict, state: dict | None, *, resume: bool = False,
         keep_state: str = "last") -> Path:
    """Write a checkpoint directory atomically (temp dir, then rename); when it holds a state,
    drop the states older than the previous one (resume points entirely, logged checkpoints'
    state.pt unless keep_state == "all"), once the new one is on disk."""
    import torch
    from safetensors.torch import save_file

    root = checkpoints_dir(run_dir)
    final = root / dir_name(step, resume)
    with atomic_dir(final) as tmp:
        save_file(weights_of(model), str(tmp / WEIGHTS), metadata={"step": str(step)})
        usual_mode(tmp / WEIGHTS)  # safetensors makes it 0600; every other file is 0644
        (tmp / META).write_text(json.dumps({**meta, "step": step, "format": FORMAT},
                                           indent=2, sort_keys=True, default=str) + "\n")
        if state is not None:
            torch.save(state, tmp / STATE)
        for kept in final.glob("*.damaged*"):  # set aside for inspection: not ours to drop
            os.replace(kept, tmp / kept.name)
    # atomic_dir fsynced `root`: the new state is durable before any older one goes
    if state is not None:
        _prune_states(run_dir, final, step, keep_state)
    return final


def _prune_states(run_dir, newest: Path, step: int, keep_state: str) -> None:
    """Keep the state just written and the one before it; drop older ones."""
    older = [p for s, p in state_dirs(run_dir) if p != newest and s <= step]
    for other in older[:-1]:  # older[-1] is the previous state, kept as a fallback
        if other.name.startswith(RESUME_PREFIX):
            shutil.rmtree(other, ignore_errors=True)
        elif keep_state != "all":
            (other / STATE).unlink(missing_ok=True)


def clean_temporaries(run_dir) -> None:
    """Remove leftovers of checkpoint writes that a crash interrupted."""
    remove_temporaries(checkpoints_dir(run_dir))


# --- reading -------------------------------------------------------------------------------

def _unreadable(path: Path, err: BaseException) -> CheckpointError:
    if isinstance(err, FileNotFoundError):  # the path is in the message already
        reason = "no such file"
    else:
        reason = " ".join(str(err).split())[:200] or type(err).__name__
    error = CheckpointError(f"checkpoint file {path} is unreadable ({reason}); delete its "
                            f"directory to fall back to an earlier checkpoint, or re-run with force")
    error.reason = reason  # for messages that name the file themselves
    return error


def read_meta(ckpt: Path) -> dict:
    path = Path(ckpt) / META
    try:
        meta = json.loads(path.read_text())
        if not isinstance(meta, dict) or "step" not in meta:
            raise ValueError("no 'step' field")
        return meta
    except (OSError, ValueError) as e:
        raise _unreadable(path, e) from None


def read_state(ckpt: Path) -> dict:
    """The training state, loaded with weights_only=True (tensors and plain containers only)."""
    import torch
    path = Path(ckpt) / STATE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or "step" not in state:
            raise ValueError("no 'step' entry")
        return state
    except Exception as e:
        raise _unreadable(path, e) from None


def check_weights(ckpt: Path) -> None:
    """Raise CheckpointError if the weights file cannot be opened (a truncated file fails its
    header check); the tensors themselves are read when loaded into a model."""
    from safetensors import safe_open
    path = Path(ckpt) / WEIGHTS
    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as e:  # safetensors raises its own error type, or OSError
        raise _unreadable(path, e) from None


def weights_of(model) -> dict:
    """The model's tensors as safetensors writes them: each one its own copy. A recurrent
    cell's weights on CUDA are views of one cuDNN block (`RecurrentLM.flatten_weights`), which
    safetensors refuses to write as they are; no family ties weights, so nothing is stored
    twice."""
    import torch
    return {k: v.detach().clone(memory_format=torch.contiguous_format)
            for k, v in model.state_dict().items()}


def load_weights(model, ckpt: Path, device="cpu") -> None:
    """Copy a checkpoint's weights into `model` (names and shapes must match exactly), in
    place, so weights that are views of one block stay so."""
    from safetensors.torch import load_file
    path = Path(ckpt) / WEIGHTS
    try:
        model.load_state_dict(load_file(str(path), device=str(device)), strict=True)
    except Exception as e:
        raise _unreadable(path, e) from None


def config_from_dict(cls, values: dict):
    """Rebuild a frozen config dataclass from a checkpoint's meta.json (lists back to tuples;
    a field the code no longer has is a CheckpointError naming it)."""
    from study.core.settings import from_json
    return from_json(cls, values, "a checkpoint's meta.json", error=CheckpointError)


def resolve_step(run_dir, step: int | str = "final") -> Path:
    """The checkpoint directory of a logged step ("final" = the last one)."""
    steps = list_checkpoints(run_dir)
    if not steps:
        raise CheckpointError(f"no checkpoints in {checkpoints_dir(run_dir)}")
    if isinstance(step, str):  # from the command line: "final" or digits
        step = steps[-1] if step == "final" else int(step) if step.isdigit() else step
    elif hasattr(step, "__index__") and not isinstance(step, bool):
        step = int(step.__index__())  # numpy integers too
    if not isinstance(step, int) or step not in steps:
        raise UsageError(f"checkpoint={step!r} is not a checkpoint of this run; choose final or "
                         f"one of {', '.join(map(str, steps))}")
    return checkpoints_dir(run_dir) / dir_name(step)


def load_model(run_dir, step: int | str = "final", device="cpu") -> tuple[Any, dict]:
    """(model in eval mode, meta) of a logged checkpoint, rebuilt through the model registry."""
    from study.core.registry import get
    ckpt = resolve_step(run_dir, step)
    meta = read_meta(ckpt)
    entry = get("model", meta["model"])
    config = config_from_dict(entry.config, meta["model_config"])
    model = entry.obj(config, int(meta["vocab_size"]), int(meta["seq_len"]))
    load_weights(model, ckpt, device="cpu")
    return model.to(device).eval(), meta


def load_task(meta: dict):
    """The task a checkpoint was trained on, rebuilt from its meta.json."""
    from study.core.registry import get
    entry = get("task", meta["task"])
    return entry.obj(config_from_dict(entry.config, meta["task_config"]))
