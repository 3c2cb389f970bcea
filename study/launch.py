"""Running a sweep's runs in parallel processes (`sweep jobs=N`), each with cores // N torch
threads: worth it for many runs on a machine with many cores (on 2 cores one small recurrent
run with both threads trained 2.6x faster than with one, so the default stays one run at a
time). Each run's output goes to `RUN_DIR/run.log`; the sweep prints a line as each run
finishes. Interrupting the sweep (Ctrl-C, SIGTERM, SIGUSR1, SIGUSR2) passes the signal to every
run, which each write a resume point and the status "interrupted".

Nothing is created for a run whose directory is refused (a folder that is not a run, one that
another live process holds): the placement and the claim are checked before its folder and
`run.log` are made; the run itself then takes the claim."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from study.core import placement
from study.core.claim import CLAIM, describe, read_holder, stale_reason
from study.core.errors import UsageError
from study.core.signals import signum_of
from study.runner import log


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_parallel(combos: list[dict[str, str]], configs, jobs: int) -> list[Path]:
    """Run every combo (`python -m study run k=v ...`) with at most `jobs` at once."""
    threads = max(1, cores() // jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    pending = list(zip(range(1, len(combos) + 1), combos, configs))
    running: dict[subprocess.Popen, tuple] = {}
    failed = []
    t0 = time.time()
    try:
        while pending or running:
            while pending and len(running) < jobs:
                i, combo, cfg = pending.pop(0)
                path = Path(cfg.path)
                refused = _refusal(path)
                if refused is not None:
                    failed.append((path, 2))
                    log(f"[{i}/{len(combos)}] REFUSED {cfg.model} seed {cfg.seed}: {refused}")
                    continue
                path.mkdir(parents=True, exist_ok=True)
                logf = open(path / "run.log", "ab")
                args = [sys.executable, "-m", "study", "run",
                        *(f"{k}={v}" for k, v in combo.items())]
                proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=logf, env=env)
                running[proc] = (i, cfg, path, logf)
                log(f"[{i}/{len(combos)}] started {cfg.task} × {cfg.model} seed {cfg.seed} "
                    f"→ {path} (log: {path / 'run.log'})")
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                i, cfg, path, logf = running.pop(proc)
                logf.close()
                if proc.returncode == 0:
                    log(f"[{i}/{len(combos)}] finished {cfg.model} seed {cfg.seed} "
                        f"({time.time() - t0:.0f} s into the sweep)")
                else:
                    failed.append((path, proc.returncode))
                    log(f"[{i}/{len(combos)}] FAILED {cfg.model} seed {cfg.seed} (exit "
                        f"{proc.returncode}); last lines of {path / 'run.log'}:")
                    log("\n".join(_tail(path / "run.log")))
    except KeyboardInterrupt as e:
        for proc in running:  # the same signal: each run then exits with its own code
            proc.send_signal(signum_of(e))
        for proc in running:
            proc.wait()
        raise
    if failed:
        raise UsageError(f"{len(failed)} of {len(combos)} runs failed: "
                         + ", ".join(f"{p} (exit {c})" for p, c in failed)
                         + "; re-run the sweep to resume them")
    return [Path(c.path) for c in configs]


def _refusal(path: Path) -> str | None:
    """Why a run may not be started in `path` (None: go ahead), checked before anything is
    created there: its placement, and a claim held by a live process."""
    try:
        placement.check(path)
    except UsageError as e:
        return str(e)
    lock = path / CLAIM
    holder = read_holder(lock)
    if holder is not None and stale_reason(lock, holder) is None:
        return f"{path} is in use by {describe(holder)}"
    return None


def _tail(path: Path, n: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []
