"""The command line: `python -m study COMMAND key=value ...`.

Bad input prints one line to stderr and exits 2 (no traceback, nothing written); torch and
pyvene are imported only by commands that need them, so `--help` and `list` answer at once.
A stop signal (Ctrl-C, SIGTERM, SIGUSR1, SIGUSR2) ends a command with one line and the exit
status 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM), after a run has written
its resume point and the status "interrupted".
"""
from __future__ import annotations

import json
import sys

from study.core.errors import UsageError
from study.core.signals import exit_code, raising_on_stop_signals, signal_name, signum_of

USAGE = """usage: python -m study COMMAND [key=value ...]

commands:
  list                                   tasks, models (parameter counts), analyses, presets
  describe task=NAME | model=NAME | analysis=NAME | train=TASK
                                         every config field with type, default and help
  sample task=NAME n=N [split=S] [seed=S] [scale=...] [task.FIELD=V ...]
                                         print N examples as JSON lines
  run task=NAME model=NAME [scale=paper|small|smoke] [seed=S] [run_dir=PATH]
      [analyses=A,B] [task.F=V] [model.F=V] [train.F=V] [force=true] [long=ok]
                                         train (resumes or skips), analyse, write the report;
                                         a CPU run estimated at over an hour needs long=ok
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
  bench train|das [key=value ...]        speed of the hot loops against a naive baseline
  doctor [task=... model=... seconds=10] torch, CUDA, driver, bf16/compile support, the
                                         settings a run would use, a tokens/s probe
  gpu-check out=DIR [device=cuda|cpu] [quick=true] [scale=...] [work=DIR] [only=ITEM,..]
                                         the whole GPU path in one check (doctor, CUDA tests,
                                         demo, every task x model x analysis, benches, paper
                                         runs): summary.md, a log and the runs without weights

scales: paper (the published setup, GPU), small (minutes on a laptop CPU), smoke (seconds)
"""


def main(argv: list[str] | None = None) -> int:
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
        print(USAGE, end="")
        return 0
    try:
        with raising_on_stop_signals():
            return handler(args) or 0
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
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
    "sweep": _lazy("study.sweep", "cmd_sweep"),
    "status": _lazy("study.status", "cmd_status"),
    "analyze": _lazy("study.commands", "cmd_analyze"),
    "report": _lazy("study.commands", "cmd_report"),
    "compare": _lazy("study.compare", "cmd_compare"),
    "bench": _lazy("study.commands", "cmd_bench"),
    "doctor": _lazy("study.doctor", "cmd_doctor"),
    "gpu-check": _lazy("study.gpu_check", "cmd_gpu_check"),
}


def print_jsonl(rows) -> None:
    for row in rows:
        print(json.dumps(row))
