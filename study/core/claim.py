"""An exclusive claim on a run directory, so two processes never train, analyse or delete in
the same one at once.

The claim is a lock file `.study-claim` created atomically (O_CREAT|O_EXCL) holding the
holder's host, pid and start time; a background thread touches it every few seconds while
the holder runs. A claim whose pid is gone (on this host) or whose heartbeat stopped minutes
ago is stale: it was left by a killed process and is taken over with a notice. Anyone else
gets a one-line `UsageError` naming the holder.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from study.core.errors import UsageError

_log = logging.getLogger(__name__)

CLAIM = ".study-claim"
HEARTBEAT_S = 5.0
STALE_AFTER_S = 180.0  # a live holder touches the file every HEARTBEAT_S; minutes of silence = gone
_held: dict[Path, int] = {}  # claims this process holds -> nesting depth (re-entry is a no-op)
_held_lock = threading.Lock()


class ClaimedError(UsageError):
    """The run directory is in use by another live process."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def read_holder(lock: Path) -> dict | None:
    """The holder recorded in a claim file (None if there is none); a garbled file reads as
    {} so it is judged by its age alone."""
    try:
        info = json.loads(lock.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def stale_reason(lock: Path, info: dict) -> str | None:
    """Why the claim is stale, or None while its holder looks alive."""
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return "gone"
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int) \
            and not _pid_alive(info["pid"]):
        return f"process {info['pid']} is gone"
    if age > STALE_AFTER_S:
        return f"no heartbeat for {age:.0f} s"
    return None


def describe(info: dict) -> str:
    since = info.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else "?"
    what = f" ({info['what']})" if info.get("what") else ""
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')} since {when}{what}"


def _create(lock: Path, info: dict) -> bool:
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(info) + "\n")
    except BaseException:  # an empty claim file would block others until it went stale
        lock.unlink(missing_ok=True)
        raise
    return True


def _take_over(lock: Path, info: dict, old: dict, reason: str) -> bool:
    """Replace a stale claim. A second lock guards the check-and-replace, so two processes that
    both found the claim stale cannot both remove it and each believe they hold it."""
    guard = lock.with_name(lock.name + ".takeover")
    with contextlib.suppress(FileNotFoundError):
        if time.time() - guard.stat().st_mtime > 30:  # a guard left by a killed process
            guard.unlink()
    if not _create(guard, info):
        return False
    try:
        current = read_holder(lock)
        if current is not None and (current != old or stale_reason(lock, current) is None):
            return False  # someone else took it over meanwhile
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        if not _create(lock, info):
            return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            guard.unlink()
    _log.info(f"notice: took over the stale claim on {lock.parent} ({describe(old)}: {reason})")
    return True


def acquire(path: Path, what: str = "") -> dict:
    """Create the claim file or raise ClaimedError naming the live holder."""
    lock = Path(path) / CLAIM
    info = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
            "what": what, "token": uuid.uuid4().hex}
    for _ in range(5):  # a few rounds: the file may vanish or go stale between the steps
        try:
            if _create(lock, info):
                return info
        except OSError as e:
            raise UsageError(f"cannot claim {path}: {os.strerror(e.errno or errno.EIO)} "
                             f"creating {lock}") from None
        old = read_holder(lock)
        if old is None:
            continue
        reason = stale_reason(lock, old)
        if reason is None:
            raise ClaimedError(f"{path} is in use by {describe(old)}; wait for it to finish or "
                               f"choose another run_dir")
        if _take_over(lock, info, old, reason):
            return info
        time.sleep(0.1)
    raise ClaimedError(f"{path} is in use by {describe(read_holder(lock) or {})}; wait for it to "
                       f"finish or choose another run_dir")


def release(path: Path, info: dict) -> None:
    """Remove the claim file if it is still ours (never one a taker-over now holds)."""
    lock = Path(path) / CLAIM
    current = read_holder(lock)
    if current and current.get("token") == info.get("token"):
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


def _heartbeat(lock: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        with contextlib.suppress(OSError):  # a full disk or a vanished file must not kill the holder
            os.utime(lock)


@contextlib.contextmanager
def claim(path, what: str = ""):
    """Hold the exclusive claim on run directory `path` (which must exist) for the block.
    Re-entering a claim this process already holds is a no-op."""
    key = Path(path).resolve()
    with _held_lock:
        if key in _held:
            _held[key] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _held_lock:
                _held[key] -= 1
        return
    info = acquire(key, what)
    with _held_lock:
        _held[key] = 1
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(key / CLAIM, stop), daemon=True,
                            name=f"claim-heartbeat {key.name}")
    beat.start()
    try:
        yield info
    finally:
        stop.set()
        beat.join(timeout=1)
        with _held_lock:
            _held.pop(key, None)
        release(key, info)


def holds(path) -> bool:
    """Whether this process holds the claim on `path`."""
    return Path(path).resolve() in _held
