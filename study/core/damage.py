"""Damaged analysis outputs are set aside, not trusted and not fatal.

A truncated table or alignment file (a killed write on a copy, a full disk elsewhere) would
make every later read fail; instead it is renamed `NAME.damaged` (kept for inspection) and the
analysis that wrote it runs again when next asked.
"""
from __future__ import annotations

import logging
from pathlib import Path

_log = logging.getLogger(__name__)

CHECKED = ("*.parquet", "*.safetensors")


def readable(path: Path) -> bool:
    """Whether a table or alignment file can be opened (its footer / header parses)."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            pq.read_metadata(path)
        elif path.suffix == ".safetensors":
            from safetensors import safe_open
            with safe_open(str(path), framework="numpy") as f:
                f.keys()
        return True
    except Exception:  # pyarrow and safetensors raise several types for a damaged file
        return False


def set_aside(path: Path) -> Path:
    """Rename a damaged file to `NAME.damaged` (`NAME.damaged.2`, ... if taken)."""
    target = path.with_name(path.name + ".damaged")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged.{n}")
    path.replace(target)
    return target


def set_aside_damaged(folder: Path, notice: str = "") -> list[Path]:
    """Set aside every unreadable table / alignment file directly in `folder`; returns the
    original paths. Prints one notice line per file."""
    moved = []
    if not folder.is_dir():
        return moved
    for pattern in CHECKED:
        for path in sorted(folder.glob(pattern)):
            if path.is_file() and not readable(path):
                target = set_aside(path)
                moved.append(path)
                _log.info(f"notice: {path} is damaged; moved it to {target.name}{notice}")
    return moved
