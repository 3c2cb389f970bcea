"""The local launcher (`sweep launcher=local`): a sweep's runs on this machine.

- `gpus=auto` (all visible GPUs; none on a CPU machine), `gpus=none` or `gpus=0,2`: each run
  gets one GPU of the list through `CUDA_VISIBLE_DEVICES` (it trains on `cuda:0`, its GPU),
  the least busy one when several runs share them.
- `jobs_per_gpu=auto|N`: runs sharing one GPU (`study/sweep/packing.py`). `auto` (the
  default) gives each run a number from its estimated memory and size: a sweep of small
  networks packs several on each GPU, gpt12 keeps one to itself. A run starts on the GPU
  with the fewest runs where it fits; the next run waits until one does.
- `jobs=N` runs at once; the default is the GPUs times the most runs one may hold, or one on
  a CPU machine (on 2 cores one small recurrent run with both threads trained 2.6x faster
  than two with one each); `jobs=auto` is the same with GPUs, else one per core. Each run
  gets cores // jobs torch threads, so the machine is never oversubscribed.
- One run at a time without a GPU list runs in this process; otherwise each run is a
  `python -m study run ...` process whose output goes to `RUN_DIR/run.log`, and the sweep
  prints a line as each starts and ends.
- A failed run does not stop the sweep: the failures are collected and reported at the end.
- Several machines sharing a file system may run the same sweep: a run whose directory's claim
  another live process holds (`study/core/claim.py`) is left to it and waited for, so no run is
  trained twice; one whose holder vanished is taken over and resumed.

Interrupting the sweep (Ctrl-C, SIGTERM, SIGUSR1, SIGUSR2) passes the signal to every run,
which each write a resume point and the status "interrupted". Nothing is created for a run
whose directory is refused (a folder that is not a run): the placement is checked before its
folder and `run.log` are made.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from study.run import runstate
from study.core import placement
from study.sweep import packing
from study.core.claim import ClaimedError, describe
from study.core.errors import UsageError
from study.core.signals import signum_of

_log = logging.getLogger(__name__)
log = _log.info

POLL_S = 0.2  # how often running processes are checked
ELSEWHERE_POLL_S = 5.0  # how often runs held by other processes are looked at again
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Outcome:
    """What became of a sweep's runs on this machine."""
    done: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)  # (run directory, why)


@dataclass(frozen=True)
class Slots:
    """How a sweep runs here: `jobs` at once, each on one of `gpus` (CUDA_VISIBLE_DEVICES
    values; empty: no GPU assigned), in this process or in subprocesses; `per_gpu` runs share
    a GPU (`auto` or a number: `study/sweep/packing.py`), whose memory is `gpu_bytes` (None:
    unknown)."""
    jobs: int
    gpus: tuple[str, ...] = ()
    in_process: bool = True
    per_gpu: str = "auto"
    gpu_bytes: int | None = None

    def shares(self) -> packing.Shares:
        """Each run's share of a GPU under these slots."""
        return packing.Shares(self.per_gpu, self.gpu_bytes, self.cores_per_gpu)

    @property
    def cores_per_gpu(self) -> int:
        return max(1, cores() // max(1, len(self.gpus)))

    @property
    def threads(self) -> int:
        return max(1, cores() // self.jobs)


def slots(jobs_text: str, gpus_text: str, n_runs: int, visible: list[str] | None = None,
          per_gpu: str = "auto", gpu_bytes: int | None = None) -> Slots:
    """Resolve `jobs=`, `gpus=` and `jobs_per_gpu=` against this machine, whose GPUs are
    `visible`, each of `gpu_bytes` of memory (default: both looked up; a one-line UsageError
    when a GPU named is not there)."""
    looked_up = visible is None
    if visible is None:
        visible = visible_gpus(required=gpus_text not in ("auto", "none"), setting=f"gpus={gpus_text}")
    if gpus_text == "none":
        gpus: list[str] = []
    elif gpus_text == "auto":
        gpus = visible
    else:
        wanted = [int(g) for g in gpus_text.split(",")]
        bad = [g for g in wanted if g >= len(visible)]
        if bad:
            raise UsageError(f"gpus={gpus_text}: GPU {bad[0]} is not visible; this machine shows "
                             f"{len(visible)} (0..{len(visible) - 1})")
        gpus = [visible[g] for g in wanted]
    if per_gpu != "auto" and not gpus:  # said, not silently dropped
        _log.warning(f"notice: jobs_per_gpu={per_gpu} has no effect: this sweep uses no GPU "
                     f"(gpus={gpus_text}, {len(visible)} visible); jobs=N sets how many runs "
                     f"train side by side on the CPU")
    on_gpus = len(gpus) * packing.most_per_gpu(per_gpu, max(1, cores() // max(1, len(gpus))))
    if jobs_text == "auto":
        jobs = on_gpus or cores()
    elif jobs_text:
        jobs = int(jobs_text)
    else:
        jobs = on_gpus or 1
    jobs = max(1, min(jobs, n_runs))
    in_process = jobs == 1 and gpus_text in ("auto", "none")
    if gpus and looked_up and gpu_bytes is None and per_gpu == "auto":
        gpu_bytes = gpu_memory()
    return Slots(jobs, tuple(gpus) if not in_process else (), in_process, per_gpu,
                 gpu_bytes if gpus else None)


def gpu_memory() -> int | None:
    """Bytes of memory of the smallest GPU this process sees (None if torch cannot tell)."""
    try:
        import torch
        return min(torch.cuda.get_device_properties(i).total_memory
                   for i in range(torch.cuda.device_count())) or None
    except (ImportError, RuntimeError, ValueError):
        return None


def visible_gpus(required: bool = False, setting: str = "gpus") -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each GPU this process sees ([] on a machine without an
    NVIDIA driver: torch is not even imported). A GPU that is present but unusable is a
    one-line UsageError naming the cause when GPUs are `required`, else none are used."""
    from study.run.preflight import nvidia_driver_loaded
    if not nvidia_driver_loaded():
        if required:
            raise UsageError(f"{setting}: no NVIDIA GPU on this machine (no driver loaded); "
                             f"use gpus=none or leave gpus= out")
        return []
    from study.train.gpu import usable_gpu_count
    count = usable_gpu_count(setting if required else None)
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [s.strip() for s in env.split(",")] if env else [str(i) for i in range(count)]
    return ids[:count]


@dataclass
class _Run:
    index: int
    combo: dict
    cfg: object  # RunConfig
    path: Path
    elsewhere: bool = False  # last seen held by another process
    not_before: float = 0.0  # monotonic time before which it is not looked at again
    share: float = 1.0  # of a GPU: 1 / the runs per GPU it allows


def run_local(planned, slots_: Slots, total: int | None = None, warm=None) -> Outcome:
    """Run `planned` (items with .combo, .cfg, .path) as `slots_` says; returns the outcome.
    `warm`: a callable run once in this process when a slot has fallen idle for good (every
    run started, some still running), to prepare what follows the runs (imports) on a core
    that would otherwise wait."""
    runs = deque(_Run(i, p.combo, p.cfg, Path(p.path)) for i, p in enumerate(planned, 1))
    total = total or len(runs)
    if slots_.gpus and not slots_.in_process:
        share = slots_.shares()
        for run in runs:
            run.share = share(run.cfg)
    if slots_.in_process:
        return _loop(runs, total, _InProcess())
    return _loop(runs, total, _Processes(slots_), warm)


def _loop(runs: deque, total: int, pool, warm=None) -> Outcome:
    out = Outcome()
    try:
        while runs or pool.busy():
            if warm is not None and not runs and pool.busy() and pool.free():
                warm, prepare = None, warm
                try:
                    prepare()  # a core is free until the last runs end: use it
                except Exception as e:  # noqa: BLE001 - the sweep's end meets it again, and says so
                    log(f"notice: preparing the sweep's end failed ({type(e).__name__}: {e}); "
                        f"the runs go on")
            now = time.monotonic()
            for run in [r for r in runs if r.not_before <= now]:
                if not pool.free(run):  # in order: the next run waits for room on a GPU
                    break
                runs.remove(run)
                _consider(run, runs, out, pool, total)
                for ended, how in pool.reap():  # a run in this process has ended already
                    _ended(ended, how, runs, out, total)
            for ended, how in pool.reap():
                _ended(ended, how, runs, out, total)
            if pool.busy():
                time.sleep(POLL_S)
            elif runs:  # every run left is held elsewhere: look again later
                time.sleep(max(0.0, min(r.not_before for r in runs) - time.monotonic()))
    except KeyboardInterrupt as e:
        pool.stop(signum_of(e))
        raise
    return out


def _consider(run: _Run, runs: deque, out: Outcome, pool, total: int) -> None:
    """Start `run` unless it is finished or held elsewhere."""
    tag = f"[{run.index}/{total}] {run.cfg.task} × {run.cfg.model} seed {run.cfg.seed}"
    finished = runstate.complete(run.path, run.cfg.analysis_settings(), run.cfg.hash8())
    if finished and not run.cfg.force:
        out.done.append(run.path)
        log(f"{tag}: already finished ({run.path})")
        return
    holder = runstate.holder(run.path)
    if holder is not None:
        if not run.elsewhere:
            log(f"{tag}: {run.path} is held by {describe(holder)}; leaving it to that process")
        _wait_elsewhere(run, runs)
        return
    try:
        placement.check(run.path)
    except UsageError as e:
        out.failed.append((run.path, str(e)))
        log(f"{tag}: REFUSED: {e}")
        return
    run.elsewhere = False
    pool.start(run, tag)


def _wait_elsewhere(run: _Run, runs: deque) -> None:
    run.elsewhere = True
    run.not_before = time.monotonic() + ELSEWHERE_POLL_S
    runs.append(run)


def _ended(run: _Run, how: str | None, runs: deque, out: Outcome, total: int) -> None:
    """Book a run that ended: `how` is None when it succeeded, else why it did not."""
    tag = f"[{run.index}/{total}] {run.cfg.model} seed {run.cfg.seed}"
    if how is None and runstate.complete(run.path, run.cfg.analysis_settings(), run.cfg.hash8()):
        out.done.append(run.path)
        log(f"{tag}: finished")
    elif runstate.holder(run.path) is not None:  # another machine claimed it first
        _wait_elsewhere(run, runs)
        log(f"{tag}: taken by another process first; waiting for it")
    elif runstate.complete(run.path, run.cfg.analysis_settings(), run.cfg.hash8()):
        out.done.append(run.path)
    else:
        out.failed.append((run.path, how or "ended unfinished"))
        log(f"{tag}: FAILED ({how}); the sweep goes on")


class _InProcess:
    """One run at a time in this process."""

    def __init__(self):
        self._ended: list[tuple[_Run, str | None]] = []

    def free(self, run: _Run | None = None) -> bool:
        return True

    def busy(self) -> bool:
        return False

    def start(self, run: _Run, tag: str) -> None:
        from study.run.runner import run as run_one
        log(f"{tag} → {run.path}")
        try:
            run_one(run.cfg)
            self._ended.append((run, None))
        except ClaimedError as e:
            self._ended.append((run, str(e)))
        except Exception as e:  # noqa: BLE001 - any failure of one run is collected, the sweep goes on
            self._ended.append((run, f"{type(e).__name__}: {e}"))

    def reap(self):
        ended, self._ended = self._ended, []
        return ended

    def stop(self, signum: int) -> None:
        pass


class _Processes:
    """Runs as `python -m study run ...` processes, each with its threads and GPU."""

    def __init__(self, slots_: Slots):
        self.slots = slots_
        self.running: dict[subprocess.Popen, tuple[_Run, object, str | None]] = {}

    def free(self, run: _Run | None = None) -> bool:
        """Whether a run may start now (`run`: and whether it fits on a GPU)."""
        if len(self.running) >= self.slots.jobs:
            return False
        return run is None or not self.slots.gpus or self._gpu(run) is not None

    def busy(self) -> bool:
        return bool(self.running)

    def _gpu(self, run: _Run) -> str | None:
        """The GPU with the fewest runs among those `run` fits on (None: none has room)."""
        if not self.slots.gpus:
            return None
        load = {g: 0.0 for g in self.slots.gpus}
        count = {g: 0 for g in self.slots.gpus}
        for r, _, g in self.running.values():
            load[g] += r.share
            count[g] += 1
        room = [g for g in self.slots.gpus if packing.fits(load[g], run.share)]
        return min(room, key=lambda g: (count[g], load[g])) if room else None

    def start(self, run: _Run, tag: str) -> None:
        gpu = self._gpu(run)
        env = child_env(self.slots.threads, gpu)
        run.path.mkdir(parents=True, exist_ok=True)
        logf = open(run.path / "run.log", "ab")
        # long=ok: the sweep checked its duration as a whole (or was told long=ok)
        args = [sys.executable, "-m", "study", "run", *(f"{k}={v}" for k, v in run.combo.items()),
                "long=ok"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=logf, env=env)
        self.running[proc] = (run, logf, gpu)
        on = f" on GPU {gpu}" if gpu is not None else ""
        log(f"{tag} started{on} → {run.path} (log: {run.path / 'run.log'})")

    def reap(self):
        ended = []
        for proc in [p for p in self.running if p.poll() is not None]:
            run, logf, _ = self.running.pop(proc)
            logf.close()
            if proc.returncode == 0:
                ended.append((run, None))
            else:
                tail = "\n".join(_tail(run.path / "run.log"))
                ended.append((run, f"exit {proc.returncode}"))
                log(f"last lines of {run.path / 'run.log'}:\n{tail}")
        return ended

    def stop(self, signum: int) -> None:
        for proc in self.running:  # the same signal: each run then exits with its own code
            proc.send_signal(signum)
        for proc in self.running:
            proc.wait()


def child_env(threads: int, gpu: str | None) -> dict[str, str]:
    """The environment of a run's process: its torch threads, its GPU, and this package on
    the import path."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def _tail(path: Path, n: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []
