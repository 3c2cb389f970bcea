"""A run directory: the one place a run's config, status, metrics, checkpoints, analyses and
report live (layout in README.md, "A run directory"). Every file is written atomically
(temp file + rename), so an interrupted run never leaves a half-written file behind."""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)
STATUSES = ("created", "running", "done", "failed")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


class RunDir:
    """Paths and small state files of one run."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    # paths -----------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.parquet"

    @property
    def summary_path(self) -> Path:
        return self.path / "summary.json"

    def analysis_dir(self, name: str) -> Path:
        return self.path / "analyses" / name

    # state ------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.config_path.exists()

    def read_json(self, name: str) -> dict:
        return json.loads((self.path / name).read_text())

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_json(self.path / name, obj)

    def status(self) -> str | None:
        try:
            return self.read_json("status.json")["status"]
        except (FileNotFoundError, KeyError, json.JSONDecodeError):
            return None

    def set_status(self, status: str, **extra: Any) -> None:
        assert status in STATUSES, status
        self.write_json("status.json", {"status": status, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra})

    def write_parquet(self, name: str, df) -> Path:
        """A pandas DataFrame as `name` (relative to the run directory), atomically."""
        import io
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        path = self.path / name
        atomic_write_bytes(path, buf.getvalue())
        return path

    def config(self) -> dict:
        return self.read_json("config.json")
