"""Atomic, durable writes: a file or directory is written under a temporary name beside its
target, fsynced, renamed onto the target, and the rename made durable by fsyncing the folder.
A reader therefore sees the old version or the new one, never a half-written one, even after
a crash or power loss; a writer that fails (an exception, Ctrl-C) leaves the old version and
no temporary behind.

Temporary names are `.<target name>.<random>.tmp`, matched by `TEMP_GLOB`: what a killed
writer leaves is recognised by that name and removed by whoever next owns the folder
(`RunDir.clean_temporaries`, `study.train.checkpoint.clean_temporaries`)."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

TEMP_GLOB = ".*.tmp"
_UMASK = os.umask(0)
os.umask(_UMASK)


def fsync_path(path: Path) -> None:
    """Flush a file's contents, or a directory's entries, to disk (a no-op where the file
    system refuses, e.g. directories on some platforms)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporaries that killed writers left in `folder` (not recursive); returns
    them. Call only while no other writer may be at work there: a live writer's temporary
    looks the same."""
    removed = sorted(Path(folder).glob(TEMP_GLOB))
    for p in removed:
        _remove(p)
    return removed


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path beside `target` (the file exists, empty) for the caller
    to write; when the block ends without error the file is fsynced, given the usual mode,
    renamed onto `target` and the folder fsynced. On any failure, KeyboardInterrupt
    included, the temporary file is removed and `target` is left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        fsync_path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual mode
        os.replace(tmp, target)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        _name_target(e, target)
        raise
    fsync_path(target.parent)


def usual_mode(path: str | os.PathLike) -> None:
    """Give a file written by a library that makes private files (safetensors writes 0600)
    the mode every other file of the project gets (0666 less the umask)."""
    os.chmod(path, 0o666 & ~_UMASK)


def _name_target(exc: BaseException, target: Path) -> None:
    """A full disk met mid-write (a write or close on an open file) names no file: raise it
    again naming the target being written, which is what the user can act on."""
    if (isinstance(exc, OSError) and exc.filename is None
            and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        raise OSError(exc.errno, exc.strerror, str(target)) from exc


@contextlib.contextmanager
def new_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Create the folder `path` (and its missing parents) for the block to fill; when the
    block fails, the folders it created are removed with what was written in them, so a
    failed writer (a full disk) leaves no empty or half-filled folder behind. A folder that
    existed before is left as it is."""
    path = Path(path)
    top = None
    for place in (path, *path.parents):
        if place.exists():
            break
        top = place
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside `target` for the caller to fill; when the
    block ends without error every file in it is fsynced and it replaces `target` whole (an
    existing `target` is first moved aside under a temporary name, then removed), and the
    folder is fsynced. On any failure the temporary directory is removed and `target` is
    left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old: Path | None = None
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700 directories
        yield tmp
        for folder, _, files in os.walk(tmp):
            for f in files:
                fsync_path(Path(folder, f))
            fsync_path(Path(folder))
        if target.exists():  # a directory cannot be renamed over a non-empty one
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=target.parent))
            os.replace(target, old)
        os.replace(tmp, target)
    except BaseException as e:
        _remove(tmp)
        if old is not None and not target.exists():
            os.replace(old, target)  # put the old version back
        _name_target(e, target)
        raise
    fsync_path(target.parent)
    if old is not None:
        _remove(old)
