"""The command line: `python -m study COMMAND key=value ...`.

Bad input prints one line to stderr and exits 2 (no traceback, nothing written; a path the
file system refuses is one line naming it); torch and pyvene are imported only by commands
that need them, so `--help` and `list` answer at once.
A stop signal (Ctrl-C, SIGTERM, SIGUSR1, SIGUSR2) ends a command with one line and the exit
status 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM), after a run has written
its resume point and the status "interrupted". What the library says goes through the
`study` logger, which the command line shows on stderr (`study/core/logs.py`). Output cut
short by its reader (`python -m study list | head -1`) ends quietly with the status 141
(128 + SIGPIPE), as a command killed by the broken pipe would.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from study.core.diskfull import disk_full
from study.core.errors import UsageError
from study.core.logs import to_terminal
from study.core.signals import exit_code, raising_on_stop_signals, signal_name, signum_of

USAGE = """usage: python -m study COMMAND [key=value ...]

commands:
  list                                   tasks, models (parameter counts), analyses, presets
  describe [task=NAME | model=NAME | analysis=NAME | train=TASK] [scale=S]
                                         every config field with type, value at the scale
                                         (paper unless given) and help; alone: how many
                                         settings there are, by group
  sample task=NAME n=N [split=S] [seed=S] [scale=...] [task.FIELD=V ...]
                                         print N examples as JSON lines
  run task=NAME model=NAME [scale=paper|small|smoke] [seed=S] [run_dir=PATH]
      [analyses=A,B|none] [task.F=V] [model.F=V] [train.F=V] [force=true] [long=ok]
  run study=NAME|PATH [key=V ...]        train (resumes or skips), analyse (default: the
                                         task's patching and DAS), write the report; a CPU
                                         run estimated at over an hour needs long=ok
  sweep KEY=V1,V2 ... | study=NAME|PATH  expand comma lists into runs; skips finished ones
      [launcher=local|slurm] [jobs=auto|N] [gpus=auto|none|0,1,...] [dry_run=true]
      [slurm.partition=P slurm.gpus=N slurm.cpus=N slurm.time=MIN ...] [wait=false]
  status SWEEP_DIR | STUDY | KEY=V1,V2 ...
                                         each run of a sweep: done, running, failed, pending
  analyze RUN_DIR analysis=A[,B] [checkpoint=final|STEP,..|all] [A.F=V ...]
                                         run analyses on an existing run
  report RUN_DIR [RUN_DIR ...] [out=DIR] [markdown=true|false]
                                         one self-contained index.html (+ report.md with PNGs);
                                         several runs are compared side by side per task
  compare RUN_DIR RUN_DIR ... [out=DIR] [compare.FIELD=V ...]
                                         one variable across runs: subspace similarity,
                                         value geometry, stitching (needs das alignments)
  results SWEEP_DIR|STUDY [out=DIR]      a finished study's tables and manifest.json (default
                                         results/<study>-<date>/)
  reproduce RESULT_DIR [work=DIR|against=DIR]
                                         rerun a result folder's study (or take another
                                         folder), compare every table
  results-docs [check=true]              rewrite the docs' result tables from results/
  bench train|das|atlas|emergence [key=value ...]
                                         speed of the hot loops against a naive baseline
  doctor [task=... model=... seconds=10] torch, CUDA, driver, bf16/compile support, the
                                         settings a run would use, a tokens/s probe
  gpu-check out=DIR [device=cuda|cpu] [quick=true] [scale=...] [work=DIR] [only=ITEM,..]
                                         the whole GPU path in one check (doctor, CUDA tests,
                                         demo, every task x model x analysis, benches, paper
                                         runs): summary.md, a log and the runs without weights

scales: paper (the published setup, GPU), small (minutes on a laptop CPU), smoke (seconds)
python -m study COMMAND --help: that command's keys, their defaults and an example
"""


BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer its reader left


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a reader gone shows here, not at exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor
        pass


PATH_KEYS = ("run_dir", "out", "work", "study")  # key=PATH options of the commands


def _check_text(args: list[str]) -> None:
    """Refuse, before any is read, an argument no path or value may be: one holding a NUL
    byte, an empty word where a RUN_DIR goes, or an empty PATH_KEYS value (which would
    otherwise quietly mean the current or the default folder)."""
    for arg in args:
        key, sep, value = arg.partition("=")
        if "\0" in arg:
            shown = f"{key}={value!r}" if sep and "\0" not in key else repr(arg)
            raise UsageError(f"{shown} holds a NUL byte, which no path or value may contain; "
                             f"remove it")
        if not arg.strip():
            raise UsageError(f"an empty argument ({arg!r}) names no directory; remove it or "
                             f"give the path")
        if sep and key in PATH_KEYS and not value.strip():
            what = "a study's name or a path" if key == "study" else "a path"
            raise UsageError(f"{key}= is empty; give it {what}")


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, args = argv[0], argv[1:]
    handler = COMMANDS.get(command)
    if handler is None:
        print(f"error: unknown command {command!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if any(a in ("-h", "--help") for a in args):
        from study.usage import command_help  # the command's forms, keys and an example
        try:
            print(command_help(command, [a for a in args if a not in ("-h", "--help")]), end="")
        except UsageError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    to_terminal()
    try:
        _check_text(args)
        with raising_on_stop_signals():
            return handler(args) or 0
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a full disk or a refused path; else raised again
        full = disk_full(e, Path.cwd())
        if full is not None:  # in any writer: one line naming the file
            print(f"error: {full}", file=sys.stderr)
            return 2
        if isinstance(e, RuntimeError) and str(e).startswith("Symlink loop"):
            # Path.resolve on Python < 3.13, wherever a path is resolved: one line naming it
            print(f"error: {e}; remove the loop or give another path", file=sys.stderr)
            return 2
        if not isinstance(e, OSError) or e.filename is None:
            raise
        # a path the file system refused: one line naming it
        where = f"{e.filename} -> {e.filename2}" if e.filename2 else f"{e.filename}"
        print(f"error: {where}: {e.strerror or e}; check the path and its permissions",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"interrupted ({signal_name(signum_of(e))}); re-run the same command to resume",
              file=sys.stderr)
        return exit_code(e)


def _lazy(module: str, func: str):
    def call(args):
        import importlib
        return getattr(importlib.import_module(module), func)(args)
    return call


COMMANDS = {
    "list": _lazy("study.commands", "cmd_list"),
    "describe": _lazy("study.commands", "cmd_describe"),
    "sample": _lazy("study.commands", "cmd_sample"),
    "run": _lazy("study.commands", "cmd_run"),
    "sweep": _lazy("study.sweep.command", "cmd_sweep"),
    "status": _lazy("study.sweep.status", "cmd_status"),
    "analyze": _lazy("study.commands", "cmd_analyze"),
    "report": _lazy("study.commands", "cmd_report"),
    "compare": _lazy("study.commands", "cmd_compare"),
    "results": _lazy("study.sweep.results", "cmd_results"),
    "reproduce": _lazy("study.sweep.reproduce", "cmd_reproduce"),
    "results-docs": _lazy("study.sweep.docs_tables", "cmd_results_docs"),
    "bench": _lazy("study.checks.bench", "cmd_bench"),
    "doctor": _lazy("study.checks.doctor", "cmd_doctor"),
    "gpu-check": _lazy("study.checks.gpu_check", "cmd_gpu_check"),
}
