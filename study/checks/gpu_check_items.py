"""What `python -m study gpu-check` checks and records: its settings (`Options`), the items it
runs with their time budgets (`Item`, `BUDGETS`) and each item's outcome (`Result`). The runner
(`study/checks/gpu_check.py`) and the summary writer (`study/checks/gpu_check_summary.py`) share them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout the items' commands run in
# name -> (budget in seconds on a GPU, budget in quick mode on a small CPU). On a GPU the
# check must end within one 10-minute job, start-up and packing included: `tests`, `demo` and
# `grid` run side by side (their group costs its longest budget), the others alone, and the
# groups' budgets add up to at most `WALL_S` (`wall_budget`). [ours] The GPU budgets are
# shares of that time, not measured needs: each item is cut to fit it (doctor's probe
# shortened, the demo and the paper runs bounded by runtime.max_minutes, the benches given
# fewer steps).
BUDGETS = {
    "doctor": (35, 240),
    "tests": (140, 240),
    "demo": (140, 300),
    "grid": (140, 300),
    "bench-train": (90, 240),
    "bench-das": (35, 180),
    "binding-paper": (70, 240),
    "assign_add-paper": (80, 240),
}
ITEM_NAMES = tuple(BUDGETS)
WALL_S = 480  # the check's wall time on one GPU, by its budgets: 8 minutes of a 10-minute job
# what comes back from a GPU job: at most this many files, each under this many bytes
MAX_FILES, MAX_FILE_BYTES = 8, 16 * 2**20


@dataclass(frozen=True)
class Options:
    out: Path
    device: str = "cuda"
    quick: bool = False
    scale: str = "paper"
    work: Path | None = None  # None: a temporary folder, removed at the end
    only: tuple[str, ...] = ITEM_NAMES


@dataclass(frozen=True)
class Item:
    """One check: its commands run one after another in `cwd` within `budget_s` seconds."""
    name: str
    commands: tuple[tuple[str, ...], ...]
    budget_s: float
    cwd: Path = ROOT
    ok_codes: tuple[int, ...] = (0,)
    alone: bool = False  # it measures speed: nothing else runs beside it


@dataclass
class Result:
    item: Item
    ok: bool
    seconds: float
    error: str = ""  # the last error line, for the summary
    output: str = ""
