"""What `python -m study gpu-check` checks and records: its settings (`Options`), the items it
runs with their time budgets (`Item`, `BUDGETS`) and each item's outcome (`Result`). The runner
(`study/checks/gpu_check.py`) and the summary writer (`study/checks/gpu_check_summary.py`) share them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout the items' commands run in
# name -> (budget in seconds on a GPU, budget in quick mode on a small CPU)
BUDGETS = {
    "doctor": (150, 240),
    "tests": (300, 240),
    "demo": (300, 300),
    "grid": (300, 300),
    "bench-train": (240, 240),
    "bench-das": (90, 180),
    "binding-paper": (240, 240),
    "assign_add-paper": (360, 240),
}
ITEM_NAMES = tuple(BUDGETS)


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
