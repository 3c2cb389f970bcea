"""The SLURM launcher (`sweep launcher=slurm`), through submitit.

One job array per sweep: each array task is one run, `python -m study run ARGS` in a
subprocess of submitit's job process (its stderr is the task's SLURM log, and the run copies
it into `RUN_DIR/run.log`). The resources are the `slurm.*` keys (`study/sweep/options.py`),
which are no part of any run's identity. At most `slurm.array_parallelism` tasks run at once.

Time limits and preemption: SLURM signals a job `slurm.signal_delay_s` before its limit
(`--signal=USR2@...`); submitit's handler calls `RunTask.checkpoint`, which passes the signal
on to the run (a run stops at the end of its step and writes a resume point; a signal reaching
it twice, from SLURM and from here, is one request) and waits for it to exit, then submitit
requeues the task (`scontrol requeue`). The requeued task starts the same command, which
resumes the run. Up to `slurm.max_requeues` time-outs per task.

The comparative report is a job that depends on the array (`afterany`): it compares and
reports the runs that finished. With `wait=true` (the default) the sweep waits for both jobs
and prints what a local sweep prints; with `wait=false` it returns after submission, printing
the job ids, and `python -m study status SWEEP_DIR` says where the runs stand.

Packing (`jobs_per_gpu`, `study/sweep/packing.py`): an array task may run several runs side by
side (`PackTask`), each a subprocess with its share of the task's `slurm.cpus` as torch
threads and one of the task's GPUs. With `slurm.gpus` >= 1, `auto` packs consecutive runs of
small networks, as many per GPU as the cores per GPU allow (at most 8), and gives gpt12 a task
of its own; `jobs_per_gpu=N` packs N runs per GPU. A CPU job (`slurm.gpus=0`) packs only when
told `jobs_per_gpu=N`: N runs share its cores. SLURM's signal reaches every run of the task;
the requeued task resumes each unfinished one.

Several machines, or a local sweep beside the array, may work on the same runs: a task whose
run is held by another live process waits for it (`study/core/claim.py`), so no run is
trained twice.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from study.run import runstate
from study.core.claim import describe
from study.core.errors import UsageError
from study.core.logs import to_terminal
from study.core.signals import signal_name
from study.sweep.launch import child_env, PACKAGE_ROOT
from study.run.runner import log
from study.sweep.finish import finish
from study.sweep.plan import record

FORWARDED = signal.SIGUSR2  # what the run receives from the task (as from SLURM's --signal)
WAIT_POLL_S = 5.0  # how often a waiting sweep looks at the queue and the run directories
PROGRESS_S = 60.0  # how often a waiting sweep prints where the runs stand (and on any change)
ELSEWHERE_POLL_S = 30.0  # how often a task whose run another process holds looks again
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED"}


class RunTask:
    """One array task: wait while another process holds the run, else run it to the end; on
    SLURM's signal, stop the run at a resume point and be requeued."""

    def __init__(self, args: list[str], path: str, cwd: str, analyses=(), config_hash=None,
                 grace_s: float = 60.0, gpus: int = 0, pack: int = 1, gpu: str | None = None):
        self.args, self.path, self.cwd = list(args), path, cwd
        # analysis names, or name -> asked settings (`RunConfig.analysis_settings`)
        self.analyses = dict(analyses) if isinstance(analyses, dict) else tuple(analyses)
        self.config_hash = config_hash
        self.grace_s, self.gpus = grace_s, gpus
        self.pack, self.gpu = pack, gpu  # runs in this task, and this run's GPU among its own
        self._proc: subprocess.Popen | None = None
        self._ended: threading.Event | None = None

    def __getstate__(self):  # the process and its watcher are this attempt's, never pickled
        return {k: v for k, v in self.__dict__.items() if k not in ("_proc", "_ended")}

    def __setstate__(self, state):
        self.__dict__.update(state, _proc=None, _ended=None)

    def __call__(self) -> str:
        to_terminal()  # the task's log shows what the library says, as the command line does
        os.chdir(self.cwd)
        while True:
            if runstate.complete(self.path, self.analyses, self.config_hash):
                _say(f"{self.path} is finished already")
                return self.path
            holder = runstate.holder(self.path)
            if holder is not None:
                _say(f"{self.path} is held by {describe(holder)}; waiting for it")
                time.sleep(ELSEWHERE_POLL_S)
                continue
            code = self._attempt()
            if code == 0:
                return self.path
            if runstate.holder(self.path) is not None:  # another process claimed it first
                continue
            if code > 128:
                raise RuntimeError(f"{self.path}: stopped by {signal_name(code - 128)} (a resume "
                                   f"point was written); re-run the sweep to resume it")
            raise RuntimeError(f"{self.path}: the run failed (exit {code}); see {self.path}/run.log")

    def _attempt(self) -> int:
        threads = max(1, (int(os.environ.get("SLURM_CPUS_PER_TASK", "0") or 0) or 1) // self.pack)
        env = child_env(threads, self.gpu if self.gpus else None)
        if not self.gpus:  # a CPU job never trains on a GPU it was not given
            env["CUDA_VISIBLE_DEVICES"] = ""
        # no refusal of a long CPU run here: SLURM's time limit and requeues govern its length
        cmd = [sys.executable, "-m", "study", "run", *self.args, "long=ok"]
        _say(f"{time.strftime('%H:%M:%S')} starting: python {' '.join(cmd[1:])} "
             f"(SLURM restart {os.environ.get('SLURM_RESTART_COUNT', '0')})")
        self._ended = threading.Event()
        self._proc = subprocess.Popen(cmd, env=env, cwd=self.cwd)
        proc, ended = self._proc, self._ended
        # waiting in a thread: submitit's signal handler may run while this thread waits and
        # must itself wait for the run without the lock Popen.wait holds
        threading.Thread(target=lambda: (proc.wait(), ended.set()), daemon=True).start()
        while not ended.wait(1.0):
            pass
        return proc.returncode

    def checkpoint(self, *args, **kwargs):
        """Called by submitit on SLURM's signal: stop the run at a resume point, then requeue
        this task (which resumes it)."""
        import submitit
        self.stop()
        return submitit.helpers.DelayedSubmission(self.again())

    def stop(self) -> None:
        """Pass SLURM's signal on to the run, and wait for it to write its resume point."""
        proc, ended = self._proc, self._ended
        if proc is not None and proc.poll() is None:
            _say(f"{time.strftime('%H:%M:%S')} time limit or preemption: stopping {self.path} "
                 f"at a resume point (signal {FORWARDED.name})")
            proc.send_signal(FORWARDED)
            if ended is not None and not ended.wait(self.grace_s):
                _say(f"{self.path} did not stop within {self.grace_s:.0f} s; it resumes from "
                     f"its last saved state")

    def again(self) -> "RunTask":
        """The same task, fresh, for the requeued job."""
        return RunTask(self.args, self.path, self.cwd, self.analyses, self.config_hash,
                       self.grace_s, self.gpus, self.pack, self.gpu)


class PackTask:
    """One array task of several runs side by side (`jobs_per_gpu`), each a `RunTask` in a
    thread of its own, run `i` on the task's GPU `i mod slurm.gpus`. It fails when any of its
    runs failed, after all of them ended."""

    def __init__(self, tasks: list[RunTask]):
        self.tasks = list(tasks)

    def __call__(self) -> list[str]:
        visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        for i, task in enumerate(self.tasks):
            task.pack = len(self.tasks)
            task.gpu = visible[i % len(visible)] if visible and task.gpus else None
        errors: list[str] = []

        def one(task: RunTask) -> None:
            try:
                task()
            except Exception as e:  # noqa: BLE001 - every run of the task ends before it fails
                errors.append(str(e))

        threads = [threading.Thread(target=one, args=(t,), daemon=True) for t in self.tasks]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(1.0)
        if errors:
            raise RuntimeError(f"{len(errors)} of the task's {len(self.tasks)} runs failed: "
                               + "; ".join(errors))
        return [t.path for t in self.tasks]

    def checkpoint(self, *args, **kwargs):
        """SLURM's signal: every run stops at a resume point, then the task is requeued."""
        import submitit
        stoppers = [threading.Thread(target=t.stop) for t in self.tasks]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        return submitit.helpers.DelayedSubmission(PackTask([t.again() for t in self.tasks]))


class ReportTask:
    """The report job: compare and report the runs of the sweep that finished."""

    def __init__(self, runs: list[tuple[str, dict, str]], out: str, cwd: str, compare=None):
        self.runs, self.out, self.cwd = runs, out, cwd  # runs: (path, analyses, config hash)
        self.compare = compare  # the sweep's CompareConfig

    def __call__(self) -> str:
        to_terminal()
        os.chdir(self.cwd)
        done = [p for p, a, h in self.runs if runstate.complete(p, a, h)]
        missing = len(self.runs) - len(done)
        if not done:
            raise RuntimeError(f"none of the {len(self.runs)} runs finished; no report")
        report = finish(done, self.out, self.compare)
        _say(f"report: {report} ({len(done)} runs" + (f"; {missing} did not finish)" if missing else ")"))
        return str(report)


def finished(planned) -> bool:
    return runstate.complete(planned.path, planned.cfg.analysis_settings(), planned.cfg.hash8())


def _say(line: str) -> None:
    log(line)


def _executor(folder: Path, cfg, *, name: str, time_min: int, gpus: int, max_requeues: int,
              dependency: str | None = None):
    try:
        import submitit
    except ImportError:
        raise UsageError("launcher=slurm needs submitit: pip install submitit (`make setup` "
                         "installs it)") from None
    ex = submitit.SlurmExecutor(folder=str(folder / "%j"), max_num_timeout=max_requeues)
    params = {"job_name": name, "time": time_min, "cpus_per_task": cfg.cpus,
              "signal_delay_s": cfg.signal_delay_s, "array_parallelism": cfg.array_parallelism,
              "setup": [f"export PYTHONPATH={PACKAGE_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}",
                        *cfg.setup_lines]}
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(cfg, key):
            params[key] = getattr(cfg, key)
    if cfg.mem_gb:
        params["mem"] = f"{int(cfg.mem_gb * 1024)}MB"
    if gpus:
        params["gpus_per_node"] = gpus
    if dependency:
        params["dependency"] = dependency
    ex.update_parameters(**params)
    return ex


def packed(todo, options) -> list[list[int]]:
    """Indices of the runs each array task runs (`jobs_per_gpu`): one each unless packed."""
    cfg = options.slurm
    if cfg.gpus == 0 and options.jobs_per_gpu == "auto":
        return [[i] for i in range(len(todo))]
    from study.sweep.packing import Shares
    per_gpu = Shares(options.jobs_per_gpu, None, max(1, cfg.cpus // max(1, cfg.gpus)))
    numbers = [per_gpu.number(r.cfg) * max(1, cfg.gpus) for r in todo]
    from study.sweep.packing import groups
    return groups(numbers)


def describe_submission(plan, options, todo: int) -> str:
    cfg = options.slurm
    where = ", ".join(f"{k} {getattr(cfg, k)}" for k in ("partition", "account", "qos", "constraint")
                      if getattr(cfg, k)) or "the default partition"
    mem = f"{cfg.mem_gb:g} GB" if cfg.mem_gb else "the default memory"
    return (f"would submit {todo} runs as one SLURM job array ({where}; per run {cfg.gpus} GPU(s), "
            f"{cfg.cpus} CPUs, {mem}, {cfg.time} min, requeued up to {cfg.max_requeues} times; "
            f"at most {cfg.array_parallelism} at once) and the report as a job after it")


def submit_sweep(plan, options) -> int:
    """Submit the sweep's unfinished runs and its report; wait for them unless wait=false."""
    cfg = options.slurm
    if shutil.which("sbatch") is None:
        raise UsageError("launcher=slurm needs SLURM's sbatch on PATH (not found on this machine); "
                         "use launcher=local here")
    cwd = os.getcwd()
    todo = [r for r in plan.runs if not finished(r)]
    if not todo:
        log(f"sweep: all {len(plan.runs)} runs are finished; writing the report here")
        report = finish(plan.paths, plan.report_dir, plan.compare)
        _print_result(plan, report)
        return 0
    folder = plan.sweep_dir.resolve() / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    grace = max(5.0, cfg.signal_delay_s - 15.0)
    runs_ex = _executor(folder, cfg, name=f"study-{plan.name}", time_min=cfg.time, gpus=cfg.gpus,
                        max_requeues=cfg.max_requeues)
    try:
        tasks = [RunTask(r.args, str(r.path.resolve()), cwd, r.cfg.analysis_settings(),
                         r.cfg.hash8(), grace, cfg.gpus) for r in todo]
        packs = packed(todo, options)
        with runs_ex.batch():
            jobs = [runs_ex.submit(tasks[p[0]] if len(p) == 1 else PackTask([tasks[i] for i in p]))
                    for p in packs]
        array = jobs[0].job_id.split("_")[0]
        report_ex = _executor(folder, cfg, name=f"study-{plan.name}-report", time_min=cfg.report_time,
                              gpus=0, max_requeues=0, dependency=f"afterany:{array}")
        runs = [(str(r.path.resolve()), r.cfg.analysis_settings(), r.cfg.hash8())
                for r in plan.runs]
        report_job = report_ex.submit(ReportTask(runs, str(plan.report_dir.resolve()), cwd,
                                                    plan.compare))
    except (OSError, subprocess.SubprocessError, RuntimeError) as e:
        raise UsageError(f"sbatch refused the sweep: {' '.join(str(e).split())[:400]}") from None
    record(plan, "slurm", {"array": array, "report": report_job.job_id, "submitted": len(todo),
                           "folder": str(folder)})
    say = print if not options.wait else log  # without waiting, the job ids are the output
    in_tasks = f" in {len(packs)} tasks" if len(packs) != len(todo) else ""
    say(f"submitted {len(todo)} runs{in_tasks} as job array {array} (at most "
        f"{cfg.array_parallelism} at once; {len(plan.runs) - len(todo)} finished already) and the report as job "
        f"{report_job.job_id} after it; logs in {folder}")
    say(f"status: python -m study status {plan.sweep_dir}")
    sys.stdout.flush()
    if not options.wait:
        return 0
    wait_for(plan, {"array": array, "report": report_job.job_id})
    report = plan.report_dir / "index.html"
    failed = [r.path for r in plan.runs if not finished(r)]
    _print_result(plan, report if report.is_file() else None, failed)
    if failed:
        raise UsageError(f"{len(failed)} of {len(plan.runs)} runs did not finish: "
                         + ", ".join(map(str, failed)) + f"; see `python -m study status "
                         f"{plan.sweep_dir}` and their run.log; re-run the sweep to resume them")
    if not report.is_file():
        raise UsageError(f"the report job {report_job.job_id} wrote no report; see its log in {folder}")
    return 0


def _print_result(plan, report, failed=()) -> None:
    for path in plan.paths:
        if path not in failed:
            print(path)
    if report is not None:
        print(f"report: {report}")
    sys.stdout.flush()


def wait_for(plan, jobs: dict[str, str]) -> None:
    """Wait until none of the jobs ({what: job id}) is queued or running, printing where the
    runs stand."""
    last, last_time = None, 0.0
    while True:
        states = job_states(list(jobs.values()))
        if states is None:  # SLURM did not answer: ask again
            time.sleep(WAIT_POLL_S)
            continue
        active = any(s in ACTIVE for counts in states.values() for s in counts)
        runs = Counter(runstate.state_of(p) for p in plan.paths)
        line = f"sweep: {runstate.summary(runs, len(plan.paths))}; " + "; ".join(
            f"{what} job {j}: " + (", ".join(f"{n} {s.lower()}" for s, n in sorted(states[j].items()))
                                   if states.get(j) else "ended") for what, j in jobs.items())
        if line != last or time.monotonic() - last_time >= PROGRESS_S:
            log(f"{time.strftime('%H:%M:%S')} {line}")
            last, last_time = line, time.monotonic()
        if not active:
            return
        time.sleep(WAIT_POLL_S)


def job_states(job_ids: list[str]) -> dict[str, Counter] | None:
    """{job id: Counter of its tasks' states} from squeue (a job SLURM no longer lists is
    absent); None when squeue could not answer."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    try:
        out = subprocess.run(["squeue", "-h", "-r", "--states=all", "-j", ",".join(job_ids),
                              "-o", "%i|%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:  # every job purged from SLURM's memory, or no controller
        return {} if "invalid job id" in out.stderr.lower() else None
    states: dict[str, Counter] = {}
    for line in out.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        if state:
            states.setdefault(job.split("_")[0], Counter())[state.strip()] += 1
    return states
