"""A run directory: the one place a run's config, status, metrics, checkpoints, analyses and
report live (layout in docs/running.md, "A run directory"). Every file is written atomically (temp
file + rename), so an interrupted run never leaves a half-written file behind; the temp file
of a write killed midway is removed when the directory is next opened by a process holding
its claim.

A run directory carries a marker, `.study-run`, holding the hash of the config its weights
were trained with: it tells a run directory from any other folder (only a marked folder is
ever cleared by `force=true`) and catches a re-run with other settings even when config.json
is gone."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from study.core.atomic import atomic_path, remove_temporaries

STATUSES = ("created", "running", "interrupted", "done", "failed")
MARKER = ".study-run"
CONFIG_KEYS = ("task", "model", "seed", "task_config", "model_config", "train")


class DamagedFileError(Exception):
    """A run's JSON file is unreadable or of the wrong shape (a UsageError is made of it by
    `RunDir`, whose messages say what to do)."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically and durably (`study.core.atomic.atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def jsonable(obj: Any) -> Any:
    """`obj` as it reads back from JSON: tuples become lists, anything else not JSON becomes
    its string (so configs compare equal to what config.json holds)."""
    return json.loads(json.dumps(obj, default=str))


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

    def read_json(self, name: str, keys: tuple[str, ...] = (), fix: str = "",
                  required: bool = True) -> dict | None:
        """A JSON object of the run directory, read here for every reader (the runner, the
        run handle, reports); a damaged file (truncated, not an object, `keys` missing) is a
        one-line UsageError naming it and `fix` (what to do), and so is a missing one, unless
        not `required` (then None)."""
        from study.core.errors import UsageError
        path = self.path / name
        try:
            obj = json.loads(path.read_text())
            if not isinstance(obj, dict):
                raise DamagedFileError(f"a JSON {type(obj).__name__}, not an object")
            missing = [k for k in keys if k not in obj]
            if missing:
                raise DamagedFileError(f"missing {', '.join(missing)}")
        except FileNotFoundError:
            if not required:
                return None
            raise UsageError(f"{path} is missing; {fix or 'restore it or re-run with force=true'}") from None
        except (ValueError, DamagedFileError) as e:  # JSONDecodeError and UnicodeDecodeError too
            reason = " ".join(str(e).split())[:120]
            raise UsageError(f"{path} is damaged ({reason}); {fix or 'restore it or re-run with force=true'}") from None
        return obj

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_json(self.path / name, obj)

    def status(self) -> str | None:
        """The recorded status; None when there is none or status.json is damaged (it is only a
        summary: training state lives in the checkpoints, so a run with a damaged status.json
        simply re-checks them)."""
        try:
            status = json.loads((self.path / "status.json").read_text())["status"]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        return status if status in STATUSES else None

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
        cfg = self.read_json("config.json", CONFIG_KEYS,
                              "delete it and re-run the `run` command that made this run (or re-run with force=true)")
        bad = [k for k in ("task_config", "model_config", "train") if not isinstance(cfg[k], dict)]
        if bad or not isinstance(cfg["task"], str) or not isinstance(cfg["model"], str):
            from study.core.errors import UsageError
            raise UsageError(f"{self.config_path} is damaged ({', '.join(bad) or 'task/model'} of the wrong type); "
                             "delete it and re-run the `run` command that made this run")
        return cfg

    # marker ------------------------------------------------------------------------------
    @property
    def marker_path(self) -> Path:
        return self.path / MARKER

    def is_marked(self) -> bool:
        return self.marker_path.is_file()

    def marker(self) -> dict | None:
        """The marker's contents ({"hash": ...}); None if unmarked, {} if unreadable."""
        try:
            obj = json.loads(self.marker_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return obj if isinstance(obj, dict) else {}

    def write_marker(self, config_hash: str) -> None:
        atomic_write_json(self.marker_path, {"hash": config_hash, "created": time.strftime("%Y-%m-%dT%H:%M:%S")})

    def clean_temporaries(self) -> list[Path]:
        """Remove temp files and directories of atomic writes a killed process left (call only
        while holding the directory's claim: another live writer's temp file would look the
        same)."""
        folders = [self.path, self.path / "analyses",
                   *(p for p in self.path.glob("analyses/*") if p.is_dir())]
        return [p for folder in folders for p in remove_temporaries(folder)]
