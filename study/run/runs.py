"""Finding a run by what it is rather than by its directory's name.

    import study
    run = study.find_run(task="counting", model="gru", analyses=("das",))   # a `Run`

Run directories are named `<task>-<model>-s<seed>-<hash8>` (the hash of their settings), so a
notebook or script that wants "the counting GRU" would otherwise paste a directory name that
changes with every setting. `find_run` looks under a directory of runs (at any depth, following
links; a run directory's own subfolders are not searched) for the runs of one task and model that are
finished (`status.json` says done, no live process holds them) and hold a table of each asked
analysis, and opens the best trained of them: the largest scale (paper, then small, then
smoke), then the most recently finished. Nothing found is one line naming the command that
makes such a run.
"""
from __future__ import annotations

import os
from pathlib import Path

from study.core import registry
from study.core.errors import UsageError
from study.core.rundir import MARKER, RunDir


def find_run(task: str, model: str, *, root=None, analyses=(), scale: str | None = None):
    """The best trained finished run of `task` x `model` under `root`, opened (`study.Run`).

    root: where to look; None: the nearest `runs/` in the working directory or a folder
    above it (`default_root`), so a notebook in `examples/` finds the repository's runs
    wherever it was opened from.

    analyses: names of analyses whose tables the run must hold ("das", "patching").
    scale: only runs of this scale; None: the largest scale found (paper > small > smoke).
    Among runs of one scale, the most recently finished. A `UsageError` (one line, naming the
    command that makes such a run) when there is none."""
    from study.run.handle import open_run
    from study.run.runstate import complete

    analyses = (analyses,) if isinstance(analyses, str) else tuple(analyses)
    root = default_root() if root is None else root
    if scale is not None and scale not in registry.SCALES:
        raise UsageError(f"find_run: scale={scale!r} is not a scale; choose from "
                         f"{', '.join(registry.SCALES)}")
    found = []
    for path in run_dirs(root):
        config = _config(path)
        if (config.get("task"), config.get("model")) != (task, model):
            continue
        if scale is not None and config.get("scale") != scale:
            continue
        if complete(path, analyses):
            found.append((_rank(config.get("scale")), _finished_at(path), str(path), path))
    if not found:
        raise UsageError(_nothing_found(task, model, root, analyses, scale))
    return open_run(max(found)[-1])


def default_root() -> Path:
    """The nearest `runs/` folder: in the working directory or the closest folder above it
    that has one (relative to the working directory, as it was found), else `runs`."""
    here = Path.cwd()
    for up, place in enumerate((here, *here.parents)):
        if (place / "runs").is_dir():
            return Path(*([".."] * up), "runs")
    return Path("runs")


def run_dirs(root) -> list[Path]:
    """Every run directory under `root` (one holding the marker a run writes, `.study-run`),
    at any depth, following links (runs kept elsewhere, on scratch storage say, and linked
    in), in name order; a run directory's own subfolders are not searched."""
    root = Path(root)
    if not root.is_dir():
        return []
    out, seen = [], set()
    for here, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        if real in seen:  # a link back up: searched already
            dirs[:] = []
            continue
        seen.add(real)
        if MARKER in files:
            out.append(Path(here))
            dirs[:] = []  # checkpoints and analyses hold no runs
        else:
            dirs.sort()
    return sorted(out)


def _config(path: Path) -> dict:
    try:
        config = RunDir(path).config()
    except (OSError, UsageError):  # a damaged config.json is no run to open
        return {}
    return config if isinstance(config, dict) else {}


def _rank(scale) -> int:
    """Larger for a larger scale; a scale this version does not know ranks last."""
    return len(registry.SCALES) - registry.SCALES.index(scale) if scale in registry.SCALES else 0


def _finished_at(path: Path) -> float:
    return (path / "status.json").stat().st_mtime


def _nothing_found(task, model, root, analyses, scale) -> str:
    """The one-line error: what was looked for, where, and the command that makes it."""
    for kind, name in (("task", task), ("model", model), *(("analysis", a) for a in analyses)):
        registry.get(kind, name)  # a name that is none: "unknown model 'x'; known models: ..."
    what = f"{task} x {model} run" + (f" at scale={scale}" if scale else "")
    holding = f" with {' and '.join(analyses)} tables" if analyses else ""
    # without a scale asked for, the laptop one: the default (paper) is refused on a CPU
    command = f"python -m study run task={task} model={model} scale={scale or 'small'}"
    command += f" analyses={','.join(analyses)}" if analyses else ""
    return f"no finished {what}{holding} under {root}: `{command}` makes one"
