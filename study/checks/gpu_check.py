"""`python -m study gpu-check out=DIR`: one prepared check of the whole GPU path, for a person
with a GPU node and a few minutes.

It runs, each as one item in its own subprocess with its own time budget (a hang or a crash
of one item is that item's failure line, never the end of the check):

    doctor            python -m study doctor seconds=5
    tests             the tests that exercise CUDA: `pytest -m gpu`, then the GPU-path,
                      doctor, preflight, streams and training-state tests
    demo              python -m study sweep study=demo, each run's training bounded to a minute
    grid              every registered task x model family x analysis that applies, at
                      scale=smoke on the device (`study/checks/gpu_check_grid.py`)
    bench-train       python -m study bench train model=all steps=20
    bench-das         python -m study bench das steps=20
    binding-paper     binding x gpt12 at scale=paper for 45 s (runtime.max_minutes=0.75)
    assign_add-paper  assign_add x attn2 at scale=paper for a minute, pools scored every 100
                      steps

and writes under OUT: `summary.md` (pass/fail per item with its time, one line per failure
naming the item and its last error line, the bench tables, steps/s per run, the GPU, torch
and CUDA versions), `gpu-check.log` (every item's output, each cut to its last lines past a
size) and `runs.tar.gz` (the run directories without their weights, capped in size): three
files, each under 16 MiB, so that the whole of OUT comes back from a GPU job that returns at
most 8 files of 16 MiB. Its budgets add up to 8 minutes of wall time on one GPU
(`gpu_check_items.WALL_S`). The exit status is 1 when any item failed.

    python -m study gpu-check out=DIR [device=cuda|cpu] [quick=true] [scale=paper|small|smoke]
                              [work=DIR] [only=ITEM,ITEM]

`device=cpu quick=true` makes every item tiny (a few steps, analyses cut to a few pairs, the
paper runs at scale=smoke), so that the same check runs end to end on a laptop CPU in
minutes; the default test suite does that. Items that only exercise the code run side by
side; the items that measure speed (doctor's probe, the benches, the paper runs) run alone,
except in quick mode, where every item shares the machine, one per core.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from study.core.alignments import REFERENCE
from study.core.coerce import coerce
from study.core.errors import UsageError
from study.core.settings import split_args
from study.checks.gpu_check_items import BUDGETS, ITEM_NAMES, ROOT, Item, Options, Result
from study.checks.gpu_check_summary import (ARCHIVE, LOG, SUMMARY, _duration, _pack, _shown,
                                     _write_log, machine_info, write_summary)

KEYS = ("out", "device", "quick", "scale", "work", "only")
DEVICES = ("cuda", "cpu")
# the tests that exercise CUDA beyond those marked `gpu`: the GPU code path, doctor, the
# device checks made at parse time, the batch streams' CUDA workers, CUDA RNG state in resumes
GPU_TEST_FILES = ("tests/train/test_gpu_path.py", "tests/checks/test_doctor.py",
                  "tests/run/test_preflight.py", "tests/train/test_streams.py",
                  "tests/train/test_train_state.py")
QUICK_TEST_FILES = ("tests/run/test_preflight.py",)  # the rest run in the default suite
# folders of the work directory that hold run directories, packed into the archive
GRACE_S = 15  # after SIGTERM (a run writes its resume point), before SIGKILL
_LIVE: set = set()  # the items' processes running now, stopped if the check is interrupted
_ABORT = threading.Event()  # the check was interrupted: items start no further command


# --- settings ---------------------------------------------------------------------------

def parse(args: list[str]) -> Options:
    """The check's settings, each validated; nothing is written here."""
    kv = split_args(args)
    unknown = [k for k in kv if k not in KEYS]
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} for gpu-check; valid: {', '.join(KEYS)}")
    if not kv.get("out"):
        raise UsageError("out= is required: the folder the summary, the log and the archive "
                         "go to (a new or empty one)")
    out = _fresh_dir("out", kv["out"])
    device = kv.get("device", "cuda")
    if device not in DEVICES:
        raise UsageError(f"device={device!r}: choose from {', '.join(DEVICES)}")
    if device == "cuda":
        from study.run.preflight import nvidia_driver_loaded
        if not nvidia_driver_loaded():
            raise UsageError("device=cuda: no NVIDIA driver on this machine; run on a GPU node, "
                             "or check the CPU path with device=cpu quick=true")
    quick = coerce("quick", kv["quick"], bool) if "quick" in kv else False
    from study.run.config import check_scale
    scale = check_scale(kv.get("scale", "smoke" if quick else "paper"))
    work = _fresh_dir("work", kv["work"]) if kv.get("work") else None
    if work is not None and (work == out or out in work.parents):
        raise UsageError(f"work={kv['work']!r} is inside out=; the run directories go "
                         f"elsewhere (out= gets at most three files)")
    only = tuple(n for n in kv.get("only", ",".join(ITEM_NAMES)).split(",") if n)
    bad = [n for n in only if n not in ITEM_NAMES]
    if bad or not only:
        raise UsageError(f"only={kv.get('only', '')!r}: choose among {', '.join(ITEM_NAMES)}")
    return Options(out, device, quick, scale, work, only)


def _fresh_dir(key: str, text: str) -> Path:
    """A folder that is new or empty and that can be created (refused otherwise)."""
    path = Path(text).expanduser().resolve()
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"{key}={text!r} is a file, not a folder")
        if any(path.iterdir()):
            raise UsageError(f"{key}={text!r} already holds files; give a new or empty folder")
    parent = next(p for p in path.parents if p.exists()) if not path.exists() else path
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{key}={text!r}: cannot create it ({parent} is not a writable folder)")
    return path


# --- the plan ---------------------------------------------------------------------------

def _python(*args: str) -> tuple[str, ...]:
    return (sys.executable, *args)


def _command(*args: str) -> tuple[tuple[str, ...], ...]:
    """An item of one command: this Python with `args`."""
    return (_python(*args),)


def plan(opts: Options, work: Path) -> list[Item]:
    """The items, in the order they run."""
    dev, quick, scale = opts.device, opts.quick, opts.scale
    train_dev = f"runtime.device={dev}"
    items = [
        Item("doctor", _command("-m", "study", "doctor",
                               *(("seconds=1", "scale=smoke") if quick else ("seconds=5",))),
             _budget("doctor", quick), alone=True),
        _tests_item(opts, work),
        Item("demo", _command("-m", "study", "sweep", "study=demo", train_dev,
                             *(_demo_quick() if quick else ("runtime.max_minutes=1",))),
             _budget("demo", quick), cwd=work / "demo"),
        Item("grid", _command("-m", "study.checks.gpu_check_grid", f"device={dev}",
                             f"quick={str(quick).lower()}", f"work={work / 'grid'}"),
             _budget("grid", quick)),
        Item("bench-train", _command("-m", "study", "bench", "train", f"scale={scale}",
                                     train_dev, f"out={work / 'bench/train.md'}",
                                     # quick: one small family, not all five
                                     *(("task=assign_add", "model=attn2", "steps=2") if quick
                                       else ("model=all", "steps=20"))),
             _budget("bench-train", quick), alone=True),
        Item("bench-das", _command("-m", "study", "bench", "das", f"scale={scale}", train_dev,
                                  f"out={work / 'bench/das.md'}",
                                  *(("steps=2",) if quick else ("steps=20",))),
             _budget("bench-das", quick), alone=True),
        Item("binding-paper", _command(
            "-m", "study", "run", "task=binding", "model=gpt12", f"scale={scale}", train_dev,
            # 45 s of training (evaluations and checkpoints included), then evaluated and
            # checkpointed as a finished run
            "runtime.max_minutes=0.75", f"run_dir={work / 'paper/binding-gpt12'}",
            *(("train.steps=4", "train.checkpoints=2") if quick else ())),
             _budget("binding-paper", quick), alone=True),
        Item("assign_add-paper", _command(
            "-m", "study", "run", "task=assign_add", "model=attn2", f"scale={scale}", train_dev,
            f"run_dir={work / 'paper/assign_add-attn2'}",
            # the preset scores the pools every 100 steps, as the authors' run did; a minute
            # of it (the routing itself is study=gpu-fidelity's)
            *(("train.steps=6", "train.checkpoints=2", "train.eval_every=2") if quick
              else ("runtime.max_minutes=1",))),
             _budget("assign_add-paper", quick), alone=True),
    ]
    return [i for i in items if i.name in opts.only]


def _budget(name: str, quick: bool) -> float:
    return BUDGETS[name][1 if quick else 0]


def wall_budget(items: list[Item], quick: bool = False) -> float:
    """The check's wall time by its budgets: each group of items side by side costs its
    longest budget, the groups run one after another."""
    return sum(max(i.budget_s for i in group) for group in _groups(items, quick))


def _tests_item(opts: Options, work: Path) -> Item:
    pytest = _python("-m", "pytest", "-q", "-p", "no:cacheprovider")
    commands = []
    if opts.device == "cuda":  # tests marked `gpu` need a GPU: none of them can pass on a CPU
        commands.append((*pytest, "-m", "gpu", f"--basetemp={work / 'pytest-gpu'}", "tests"))
    files = QUICK_TEST_FILES if opts.quick else GPU_TEST_FILES
    commands.append((*pytest, f"--basetemp={work / 'pytest'}", *files))
    # exit status 5: no test is marked `gpu` (none collected), which is no failure
    return Item("tests", tuple(commands), _budget("tests", opts.quick), ok_codes=(0, 5))


# what a quick check needs of an analysis is that its code path runs on the device,
# not what it finds: a few pairs, steps and examples, two positions probed
QUICK_TRAIN = {"train.steps": "2", "train.checkpoints": "1", "train.eval_examples": "16"}
QUICK_ANALYSES = {
    "das": {"steps": "1", "restarts": "1", "controls": "false", "k": "1", "n_train": "32",
            "n_test": "16", "alignments": REFERENCE},
    "patching": {"n_pairs": "4"},
    "probes": {"n_examples": "32", "layers": "0", "positions": "1,2"},
    "circuits": {"n_examples": "8", "n_induction": "4"},
}


def _demo_quick() -> tuple[str, ...]:
    """The demo at scale=smoke for a few steps, one of its three families (a sweep, a run,
    its analyses and the study's report; comparisons need two), in the sweep's own process."""
    settings = {"scale": "smoke", "jobs": "1", "model": "rope2", **QUICK_TRAIN}
    for name in ("das", "patching", "probes"):  # the demo's analyses
        settings.update({f"{name}.{k}": v for k, v in QUICK_ANALYSES[name].items()})
    return tuple(f"{k}={v}" for k, v in settings.items())


# --- running items ----------------------------------------------------------------------

def _env(opts: Options) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # an uninstalled checkout: `python -m study` finds the package from any folder
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if opts.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # analyses, doctor and benches pick cuda where they see it
    if opts.quick:  # tiny networks run fastest on one thread, and the items run side by side
        env["OMP_NUM_THREADS"] = "1"
    return env


def run_item(item: Item, env: dict, logs: Path) -> Result:
    """Run the item's commands within its budget; its output goes to `logs/<name>.log`."""
    path = logs / f"{item.name}.log"
    item.cwd.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    error = ""
    with open(path, "w", encoding="utf-8", errors="replace") as out:
        for command in item.commands:
            if _ABORT.is_set():
                error = "stopped: the check was interrupted"
                break
            out.write(f"$ {_shown(command)}\n")
            out.flush()
            left = item.budget_s - (time.perf_counter() - t0)
            code = _run(command, item.cwd, env, out, left)
            if code is None:
                error = f"timed out after {item.budget_s:.0f} s (its budget)"
                break
            if code not in item.ok_codes and _ABORT.is_set():
                error = "stopped: the check was interrupted"
                break
            if code not in item.ok_codes:
                error = f"exit status {code}"
                break
    text = path.read_text(encoding="utf-8", errors="replace")
    last = last_error_line(text) if error.startswith(("timed out", "exit status")) else ""
    if error.startswith("timed out") and last:
        error += f"; its last line: {last}"
    elif error.startswith("exit status") and last:
        error = f"{last} ({error})"
    return Result(item, not error, time.perf_counter() - t0, error, text)


def _run(command, cwd: Path, env: dict, out, seconds: float) -> int | None:
    """The exit status, or None when it ran out of time (its process group is stopped)."""
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        out.write(f"error: cannot start {command[0]}: {e}\n")
        return 127
    _LIVE.add(proc)
    try:
        return proc.wait(timeout=max(seconds, 0.1))
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None
    except BaseException:  # Ctrl-C or a stop signal: the item's processes go with the check
        _stop(proc)
        raise
    finally:
        _LIVE.discard(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the item's whole process group (a sweep's runs, data workers), which lets a
    run write its resume point; after a grace, SIGKILL to whatever of the group is left."""
    for sig, grace in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # the group is gone
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass



# the line that says why an item failed, most telling first: a one-line refusal of the CLI,
# a failed test, a check doctor marks NO, an exception's last traceback line
_ERROR_PATTERNS = (
    re.compile(r"^error: "),
    re.compile(r"^(FAILED|ERROR) "),
    re.compile(r"^\S.*\s(NO|UNUSABLE|REFUSED): "),
    re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b.*"),
)


def last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    for pattern in _ERROR_PATTERNS:
        hits = [ln for ln in lines if pattern.match(ln)]
        if hits:
            return _short(hits[-1])
    return _short(lines[-1]) if lines else ""


def _short(line: str, n: int = 300) -> str:
    line = " ".join(line.split())
    return line if len(line) <= n else line[:n - 3] + "..."


def _groups(items: list[Item], quick: bool) -> list[list[Item]]:
    """Consecutive items that may share the machine run together; one that measures speed
    runs alone. Quick mode measures nothing worth keeping: every item shares."""
    if quick:
        return [items] if items else []
    groups: list[list[Item]] = []
    for item in items:
        if groups and not item.alone and not groups[-1][0].alone:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


class _Check:
    """One run of the check: the items in their groups, one line per item as it starts and
    as it ends, the summary rewritten as each item ends."""

    def __init__(self, opts: Options, work: Path):
        self.opts, self.work = opts, work
        self.env = _env(opts)
        self.items = plan(opts, work)
        self.index = {item.name: i + 1 for i, item in enumerate(self.items)}
        self.results: list[Result] = []  # in the order the items ended
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.started = time.time()
        self.machine: dict = {}

    def say(self, item: Item, text: str) -> None:
        with self.lock:
            print(f"[{self.index[item.name]}/{len(self.items)}] {item.name}: {text}", flush=True)

    def run(self) -> None:
        self.machine = machine_info(self.env)
        for group in _groups(self.items, self.opts.quick):
            self._run_group(group)

    def _run_group(self, group: list[Item]) -> None:
        """The group's items, at most `_workers` at a time, each started in plan order."""
        queue = list(group)

        def worker() -> None:
            while not _ABORT.is_set():
                with self.lock:
                    if not queue:
                        return
                    item = queue.pop(0)
                self._one(item)

        if len(group) == 1:
            self._one(group[0])
            return
        self.threads = [threading.Thread(target=worker, daemon=True)
                        for _ in range(_workers(self.opts, group))]
        for t in self.threads:
            t.start()
        for t in self.threads:
            while t.is_alive():  # a join with a timeout lets Ctrl-C through to this thread
                t.join(0.5)

    def _one(self, item: Item) -> None:
        self.say(item, f"started (budget {item.budget_s:.0f} s): {_shown(item.commands[0])}")
        try:
            res = run_item(item, self.env, self.work / "logs")
        except Exception as e:  # noqa: BLE001 - the check failing to run an item is its line
            res = Result(item, False, 0.0, f"the check could not run it: {type(e).__name__}: {e}")
        self.say(item, f"passed in {res.seconds:.1f} s" if res.ok else
                 f"FAILED in {res.seconds:.1f} s: {res.error}")
        with self.lock:
            self.results.append(res)
            self.write_summary()

    def stop(self) -> None:
        """Stop every item's processes (Ctrl-C, a stop signal) and wait for their lines."""
        _ABORT.set()
        for proc in list(_LIVE):
            _stop(proc)
        for t in self.threads:
            t.join(GRACE_S + 10)

    def write_summary(self, pack_error: str | None = None) -> None:
        write_summary(self.opts, self.machine, self.items, self.results, self.work,
                      self.started, pack_error)


def _workers(opts: Options, group: list[Item]) -> int:
    """Items at once: every shared one on a GPU node; as many as cores in quick mode, where
    the items' small networks each run on one thread (`_env`)."""
    return min(os.cpu_count() or 1, len(group)) if opts.quick else len(group)


# --- the command --------------------------------------------------------------------------

def cmd_gpu_check(args) -> int:
    opts = parse(args)
    _ABORT.clear()
    work = opts.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    opts.out.mkdir(parents=True, exist_ok=True)
    check = _Check(opts, work)
    print(f"gpu-check: {len(check.items)} items on {opts.device} "
          f"(quick={str(opts.quick).lower()}, scale={opts.scale}; budgets "
          f"{wall_budget(check.items, opts.quick):.0f} s of wall time); runs in {work}"
          f"{' (removed at the end)' if opts.work is None else ''}; summary in {opts.out}",
          flush=True)
    try:
        check.run()
    finally:  # also on Ctrl-C: the items' processes are stopped, what ran is written down
        check.stop()
        _write_log(opts.out / LOG, check.machine, check.results)
        pack_error = _pack(work, opts.out / ARCHIVE)
        check.write_summary(pack_error)
        if opts.work is None:
            shutil.rmtree(work, ignore_errors=True)
    passed = sum(r.ok for r in check.results)
    print(f"gpu-check: {passed} of {len(check.items)} items passed in "
          f"{_duration(time.time() - check.started)}"
          f"{'; ' + pack_error if pack_error else ''}; summary: {opts.out / SUMMARY}", flush=True)
    return 0 if passed == len(check.items) and not pack_error else 1
