"""A full disk while writing a run is one line naming the file, not a traceback.

Python raises OSError(ENOSPC) naming the file; safetensors raises its own error quoting the
OS's message ("No space left on device"); torch's zip writer raises a RuntimeError
("file write failed") that names neither, so that case is recognised by its message and the
free space left where the run is written.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

from study.core.errors import UsageError

_TORCH_WRITE_FAILED = ("file write failed", "unexpected pos")
_OS_FULL = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))  # "No space left on device", ...


def _file_in_traceback(exc: BaseException, where: Path) -> str | None:
    """The file being written when `exc` was raised: the innermost frame's local that is a path
    under `where` (a failed close() or torch's writer do not name it in the error)."""
    root = os.fspath(where)
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, (str, os.PathLike)):
                text = os.fspath(value)
                if isinstance(text, str) and text.startswith(root) and text != root:
                    return text
    return None


def disk_full(exc: BaseException, where: Path) -> UsageError | None:
    """The one-line error for `exc` if it is a full disk, else None."""
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    # safetensors' writer raises its own error type, quoting the OS's message
    full = full or any(m in str(exc) for m in _OS_FULL)
    if not full and isinstance(exc, RuntimeError) and any(m in str(exc) for m in _TORCH_WRITE_FAILED):
        try:
            full = shutil.disk_usage(where).free < 64 << 20
        except OSError:
            return None
    if not full:
        return None
    path = getattr(exc, "filename", None) or _file_in_traceback(exc, where) or where
    return UsageError(f"no space left on device writing {path}; free some space and re-run the "
                      f"same command to resume")


@contextlib.contextmanager
def reporting_disk_full(where):
    """Turn a full disk inside the block into a one-line UsageError."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - anything else is raised again unchanged
        err = disk_full(e, Path(where))
        if err is None:
            raise
        raise err from None


def ignore_disk_full(func, *args, **kwargs) -> None:
    """Call `func` (a best-effort write like a status update) and drop a full-disk error, so
    it cannot hide the error being reported."""
    try:
        func(*args, **kwargs)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
