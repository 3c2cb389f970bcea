"""Handlers of the simple commands (list, describe, sample, run, analyze, report, compare).

`analyze` and `report` open their run directories with the run handle (`study.open_run`).
`analyze` appends to the run's `run.log`, with the time of each analysis and the report."""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
from pathlib import Path

from study.core import registry
from study.core.coerce import coerce
from study.run.config import check_scale, resolve
from study.core.settings import did_you_mean, split_args, split_dirs_and_args
from study.core.errors import UsageError
from study.train.config import TrainConfig

HOME_TASK = "binding"  # parameter counts in `list` are shown for each task's vocabulary
_log = logging.getLogger(__name__)


def cmd_list(args):
    if args:
        raise UsageError(f"list takes no arguments (got {' '.join(args)})")
    tasks = registry.entries("task")
    built = {name: e.obj(e.make_config("paper")) for name, e in tasks.items()}
    print("tasks:")
    for name, e in tasks.items():
        t = built[name]
        print(f"  {name:<12} vocab {len(t.vocab):>3}, length {t.seq_len:>3}; {e.help}")
    print("\nmodels (parameters at scale=paper, per task):")
    print("  " + " " * 12 + "".join(f"{t:>14}" for t in tasks) + "  capabilities")
    for name, e in registry.entries("model").items():
        cfg = e.make_config("paper")
        counts = "".join(f"{_fmt_params(cfg.param_count(len(t.vocab), t.seq_len)):>14}" for t in built.values())
        print(f"  {name:<12}{counts}  {', '.join(sorted(e.capabilities)) or '-'}")
    print("\nanalyses:")
    for name, e in registry.entries("analysis").items():
        req = f" (needs {', '.join(sorted(e.requires))})" if e.requires else ""
        print(f"  {name:<12} {e.help}{req}")
    print(f"\nscales: {', '.join(registry.SCALES)} (presets of every task and model)")


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


def cmd_describe(args):
    kv = split_args(args)
    scale = check_scale(kv.pop("scale", "paper"))  # the values shown: what a run would use
    if not kv:
        _count_settings()
        return
    kinds = (*registry.KINDS, "train")
    groups = [k for k in kv if k in kinds]
    if len(groups) != 1 or len(kv) != 1:
        raise UsageError("describe takes nothing (the count of settings) or exactly one of "
                         "task=NAME, model=NAME, analysis=NAME, train=TASK (training settings "
                         "with that task's presets), and optionally scale=")
    kind = groups[0]
    if kind == "train":
        entry = registry.get("task", kv[kind])
        print(f"training settings (train.FIELD), presets from task {entry.name}, values at "
              f"scale={scale}:")
        _describe_fields(TrainConfig, "train.", entry.obj.train_presets, scale)
        return
    entry = registry.get(kind, kv[kind])
    print(f"{kind} {entry.name}: {entry.help}")
    if entry.capabilities:
        print(f"capabilities: {', '.join(sorted(entry.capabilities))}")
    if entry.requires:
        print(f"requires: {', '.join(sorted(entry.requires))}")
    print(f"values at scale={scale} (scale= shows another), each scale's preset in brackets:")
    _describe_fields(entry.config, entry.prefix + ".", entry.presets, scale)
    if kind == "task":
        print("\ntraining (train.FIELD), presets from this task:")
        _describe_fields(TrainConfig, "train.", entry.obj.train_presets, scale)


def _count_settings() -> None:
    """How many settings there are: those a run of one task and one model family takes (the
    run keys, its task's, its family's, training's and those of every analysis it can run),
    every key of what a run computes once by group, the speed-only ones (`runtime.*`: the
    code chooses them unless given) and where a sweep runs. Values the code holds fixed
    (`study.core.settings.fixed`) are no settings and are not counted."""
    from study.analyses.compare import CompareConfig
    from study.core.settings import describe_fields
    from study.run.config import TOP_KEYS
    from study.run.runtime_keys import runtime_keys
    from study.sweep.options import SWEEP_KEYS, SlurmConfig

    def names(cls) -> set[str]:  # the settings of a group that change what a run computes
        return {f.name for f in describe_fields(cls) if not f.runtime}

    entries = {kind: registry.entries(kind) for kind in registry.KINDS}
    train = len(names(TrainConfig))
    per_run = {}
    for t, task in entries["task"].items():
        for m, model in entries["model"].items():
            able = [a for a in entries["analysis"].values() if a.requires <= model.capabilities]
            per_run[f"{t} x {m}"] = (len(TOP_KEYS) + len(names(task.config)) + train
                                     + len(names(model.config))
                                     + sum(len(names(a.config)) for a in able))
    low, high = min(per_run.values()), max(per_run.values())
    shown = ", ".join(f"{k} {v}" for k, v in per_run.items() if k in _EXAMPLES)
    print(f"settings of one run: {low} to {high} (a task and a model family, with every "
          f"analysis the family can run; {shown})")
    groups = [("run keys", len(TOP_KEYS), ", ".join(TOP_KEYS))]
    for kind in ("task", "model"):
        keys = set().union(*(names(e.config) for e in entries[kind].values()))
        each = ", ".join(f"{n} {len(names(e.config))}" for n, e in entries[kind].items())
        groups.append((f"{kind}.*", len(keys), f"{each}; a key several share counts once"))
    groups.append(("train.*", train, "the training schedule, presets from the task"))
    each = {n: len(names(e.config)) for n, e in entries["analysis"].items()}
    groups.append(("analyses", sum(each.values()), ", ".join(f"{n}.* {v}" for n, v in each.items())))
    groups.append(("compare.*", len(names(CompareConfig)), "the comparisons at a sweep's end"))
    total = sum(n for _, n, _ in groups)
    print(f"what a run computes, each key once: {total}")
    for label, n, what in groups:
        print(f"  {n:>4}  {label}: {what}")
    keys = runtime_keys()
    print(f"how a run executes: {len(keys)} (runtime.{', runtime.'.join(keys)}; chosen by the "
          f"code unless given, no part of a run's identity)")
    where = len(describe_fields(SlurmConfig)) + len(SWEEP_KEYS)
    print(f"where a sweep runs: {where} (its {len(SWEEP_KEYS)} keys and slurm.*)")


_EXAMPLES = ("counting x gru", "binding x gpt12", "assign_add x attn2")


def _describe_fields(cls, prefix: str, presets: dict, scale: str) -> None:
    """Type, value at `scale`, per-scale preset and declared help of every field."""
    from study.usage import field_lines
    print("\n".join(field_lines(cls, prefix, presets, scale)))


def cmd_sample(args):
    kv = split_args(args)
    if "task" not in kv:
        raise UsageError(f"task= is required; choose from {', '.join(registry.entries('task'))}")
    entry = registry.get("task", kv.pop("task"))
    n = coerce("n", kv.pop("n", "5"), int)
    if n < 1:
        raise UsageError(f"n={n}: expected a positive integer")
    split = kv.pop("split", "train")
    scale = check_scale(kv.pop("scale", "smoke"))
    if "seed" in kv:
        kv["task.seed"] = kv.pop("seed")
    bad = [k for k in kv if not k.startswith("task.")]
    if bad:
        raise UsageError(f"unknown key {bad[0]!r} for sample; valid: task, n, split, seed, scale, task.<field>")
    task_config = entry.make_config(scale, {k[len("task."):]: v for k, v in kv.items()})
    from study.run.preflight import check_data
    check_data(entry.name, task_config)
    task = entry.obj(task_config)
    if split not in task.splits:
        raise UsageError(f"split={split!r} is not a split of task {entry.name}; choose from {', '.join(task.splits)}")
    rows = task.examples(split, n)
    for row in rows:
        print(json.dumps(row))
    if len(rows) < n:  # said, so that a short list is not taken for the n asked
        print(f"notice: split {split} of task {entry.name} holds {len(rows)} examples at "
              f"scale={scale}; all {len(rows)} shown (n={n} asked)", file=sys.stderr)


def cmd_run(args):
    from study.run.config import with_standard_analyses
    given = split_args(args)
    if "study" in given:  # a study file of one run: its settings under the command line's
        given = _one_run(given)
    allow_long = _yes(given.pop("long", "no"), "long")
    cfg = resolve(with_standard_analyses(given))  # no analyses=: the task's standard ones
    _check_duration(cfg, allow_long, given)
    from study.run.runner import run
    rd = run(cfg)
    for line in _das_lines(rd.path):
        print(line)
    print(rd.path)
    print(f"report: {rd.path / 'report.html'}")


def _one_run(given: dict) -> dict:
    """`run study=NAME|PATH ...`: the settings of a study file that describes one run
    (`examples/quickstart.toml`), the command line's over them; a study of several runs is
    refused, naming `sweep`. Settings of how a sweep runs (`jobs`, ...) do not apply."""
    from study.sweep import studies
    from study.sweep.options import SWEEP_KEYS
    from study.sweep.plan import expand
    ref = given.pop("study")
    study = studies.load(ref)
    sweeps = study.sweeps()
    settings = {k: v for k, v in sweeps[0].items()
                if k not in SWEEP_KEYS and not k.startswith(("compare.", "slurm."))}
    merged = {**settings, **given}
    runs = len(sweeps) if len(sweeps) > 1 else len(expand({k: v for k, v in merged.items()
                                                           if k != "run_dir"}))
    if runs != 1:
        raise UsageError(f"study={ref} describes {runs} runs; run takes a study of one run "
                         f"(python -m study sweep study={ref} runs them all)")
    return merged


def _das_lines(path) -> list[str]:
    """The run's DAS result as a small table: test IIA (on tested pairs) per variable, site
    and k, a column per alignment, at the final checkpoint; none without DAS tables."""
    import pandas as pd
    table = Path(path) / "analyses" / "das" / "das.parquet"
    try:
        df = pd.read_parquet(table)
    except (OSError, ValueError):
        return []
    df = df[(df["split"] == "test") & (df["checkpoint"] == df["checkpoint"].max())]
    if df.empty:
        return []
    wide = df.pivot_table(index=["variable", "site", "k"], columns="alignment", values="iia",
                          aggfunc="first", sort=False)
    names = list(wide.columns)
    lines = [f"das: test IIA by k and alignment ({table})",
             f"  {'variable':<16} {'site':<14} {'k':>3}  " + "  ".join(f"{n:>7}" for n in names)]
    for (variable, site, k), row in wide.iterrows():
        cells = "  ".join("      -" if pd.isna(row[n]) else f"{row[n]:7.3f}" for n in names)
        lines.append(f"  {variable:<16} {site:<14} {int(k):>3}  {cells}")
    return lines


def _yes(value: str, key: str) -> bool:
    if value not in ("ok", "no"):
        raise UsageError(f"{key}={value!r}: use {key}=ok to start a run expected to train "
                         f"for over an hour on this CPU")
    return value == "ok"


def _check_duration(cfg, allow_long: bool, kv: dict) -> None:
    """Refuse a CPU run that would work for over an hour here, unless long=ok (a resumed
    run counts only the steps left, a finished one nothing; `study/run/estimate.py`), naming
    the laptop variant's command with its estimate where this run is not it."""
    from study.core import placement
    from study.run import runstate
    from study.run.build import build_task
    from study.run.estimate import SweepRun, check_long, on_cpu, steps_left
    from study.run.preflight import nvidia_driver_loaded

    if allow_long or not on_cpu(cfg, nvidia_driver_loaded()):
        return
    path = placement.check(cfg.path)  # a bad run_dir is refused first, in one line
    if not cfg.force and runstate.complete(path, cfg.analysis_settings(), cfg.hash8()):
        return
    left = steps_left(cfg, path)
    check_long([SweepRun("this run", cfg, build_task(cfg), left)], 1, None, allow_long,
               instead=lambda: _laptop_variant(cfg, kv))  # probed only for a refusal


def _laptop_variant(cfg, given: dict) -> str:
    """The command as given (`given`) at scale=small, with its estimate on this CPU ("" for a
    small run, or where that too would take over an hour)."""
    if cfg.scale == "small":
        return ""
    from study.run.build import build_task
    from study.run.config import with_standard_analyses
    from study.run.estimate import LONG_S, SweepRun, duration, estimate, said
    small_kv = {k: v for k, v in given.items() if k not in ("scale", "run_dir", "force")}
    small_kv["scale"] = "small"
    try:
        small = resolve(with_standard_analyses(small_kv))
    except UsageError:  # an override that only the paper's sizes take
        return ""
    est = estimate([SweepRun("small", small, build_task(small), small.train.steps)])
    if est.total > LONG_S:  # a busy machine: it too needs the escape
        small_kv["long"] = "ok"
    return (f"the laptop variant, `python -m study run {_shown(small_kv)}` (about "
            f"{duration(est.total)} here: {said(est.parts[0])})")


def _shown(kv: dict) -> str:
    """key=value words of a command, task, model and scale first."""
    first = [k for k in ("task", "model", "scale") if k in kv]
    return " ".join(f"{k}={kv[k]}" for k in [*first, *(k for k in kv if k not in first)])


def cmd_analyze(args):
    if not args or "=" in args[0]:
        raise UsageError("usage: analyze RUN_DIR analysis=NAME[,NAME] [checkpoint=final|STEP,..|all] [NAME.FIELD=V]")
    from study.run.handle import open_run
    kv = split_args(args[1:])
    for key in kv:  # a near miss (run's analyses=) is named before the run is opened
        if "." not in key and key not in ("analysis", "checkpoint"):
            raise UsageError(f"unknown key {key!r} for analyze"
                             f"{did_you_mean(key, ('analysis', 'checkpoint'))}; valid: "
                             f"analysis, checkpoint, <analysis>.<field>")
    run = open_run(args[0])
    names = tuple(a for a in kv.pop("analysis", "").split(",") if a)
    if not names:
        raise UsageError(f"analysis= is required; choose from {', '.join(registry.entries('analysis'))}")
    steps = _checkpoints(run, kv.pop("checkpoint", "final"))
    from study.run.analyze import analyze
    from study.core import runlog
    from study.core.claim import claim
    from study.core.diskfull import reporting_disk_full
    from study.core.logs import LOG_ONLY
    from study.core.progress import stage_times
    from study.run.runner import write_report
    configs = run.analysis_configs(names, kv)  # every setting checked before any work
    _check_metas(run, steps)  # every checkpoint readable before any work
    # the report is written under the same claim and full-disk handling as the tables
    with reporting_disk_full(run.path), claim(run.path, "analyze"), \
            runlog.kept(run.path / "run.log"), stage_times(_log):
        _log.info(f"analyze {','.join(names)} on {socket.gethostname()} (pid {os.getpid()})",
                  extra=LOG_ONLY)
        latest = "final" if steps == ["final"] else max(steps)
        for step in steps:  # each logs "analysis NAME on RUN (step N)"
            # a trajectory (circuits.trajectory) only from the latest step: it holds the
            # earlier ones, which would otherwise be scored again at every step
            analyze(run, configs, checkpoint=step, trajectory=step == latest)
        write_report(run.rundir)  # the run's report.html now shows the new tables
    for name in names:
        print(run.rundir.analysis_dir(name))


def _check_metas(run, steps: list) -> None:
    """A one-line error for a checkpoint whose meta.json is missing or damaged, before the
    first analysis runs (the run handle would raise the same at that step)."""
    from study.run.handle import META_KEYS
    from study.train.checkpoint import META, resolve_step
    for step in steps:
        ckpt = resolve_step(run.path, step)
        run.rundir.read_json(str(ckpt.relative_to(run.path) / META), META_KEYS,
                             f"delete {ckpt} to fall back to an earlier checkpoint, or re-run "
                             f"with force=true")


def _checkpoints(run, value: str) -> list:
    """`checkpoint=`: final | STEP | STEP,STEP,... | all (every logged checkpoint, oldest
    first: the analysis tables then hold a trajectory)."""
    if value == "final":
        return ["final"]
    have = run.checkpoints
    if value == "all":
        if not have:
            raise UsageError(f"{run.path} has no checkpoints to analyse")
        return have
    try:
        steps = [int(v) for v in value.split(",")]
    except ValueError:
        raise UsageError(f"checkpoint={value!r}: give final, all, a step or a comma list of "
                         f"steps") from None
    missing = [st for st in steps if st not in have]
    if missing:
        shown = ", ".join(map(str, have[:8])) + (" ..." if len(have) > 8 else "")
        raise UsageError(f"checkpoint={missing[0]} is not a checkpoint of {run.path}; it has "
                         f"{shown or 'none'}")
    return steps


def cmd_report(args):
    from study.run.handle import open_runs
    from study.claims.runs import labelled
    from study.reports.write import default_out, write_runs_report
    dirs, options = split_dirs_and_args(args)
    out = options.pop("out", None)
    markdown = coerce("markdown", options.pop("markdown", "true"), bool)
    if options:
        raise UsageError(f"report: unknown option {next(iter(options))!r}; usage: report "
                         f"RUN_DIR [RUN_DIR ...] [out=DIR] [markdown=true|false]")
    if not dirs:
        raise UsageError("report needs at least one RUN_DIR: report RUN_DIR [RUN_DIR ...] [out=DIR]")
    opened = open_runs(dirs)  # a path that is no run directory: one line, first
    if out is not None:
        check_out_dir(out)
    from study.core.outfolder import check_out
    from study.reports.write import is_report_folder
    check_out(out or default_out(dirs), "a report folder",
              lambda folder: is_report_folder(folder, made_here=out is None))
    runs = []
    for run in opened:  # a damaged run is named in one line; the others are reported
        try:
            runs.append(run.run_tables)
        except UsageError as e:
            if len(dirs) == 1:
                raise
            print(f"warning: {e}; {run.path} is left out of the report", file=sys.stderr)
    if not runs:
        raise UsageError("no run could be read; see the lines above")
    runs = labelled(runs)
    print(write_runs_report(runs, out or default_out(dirs), markdown=markdown), flush=True)


def check_out_dir(value: str, key: str = "out") -> Path:
    """Refuse, before anything is written, an output folder that cannot be one: a file, a
    path through a file, a folder this user cannot write in."""
    path = Path(value).expanduser()
    for place in (path, *path.parents):
        try:
            if not place.exists():
                continue
        except OSError as e:
            raise UsageError(f"{key}={value} cannot be used ({e.strerror}); choose another "
                             f"{key}=") from None
        if not place.is_dir():
            what = "is a file" if place == path else f"goes through the file {place}"
            raise UsageError(f"{key}={value} {what}, not a folder; choose another {key}=")
        if not os.access(place, os.W_OK | os.X_OK):
            raise UsageError(f"{key}={value}: cannot write in {place} (permission denied); "
                             f"choose a folder you can write to")
        return path
    return path


def cmd_compare(args: list[str]) -> int:
    dirs, overrides = split_dirs_and_args(args)
    out = overrides.pop("out", None)
    if not dirs:
        raise UsageError("usage: compare RUN_DIR [RUN_DIR ...] [out=DIR] [compare.FIELD=V]")
    from study.run.compare import compare_config, compare_runs
    cfg = compare_config(overrides)  # the run directories are opened (checked) by compare_runs
    from study.reports.write import default_out
    out_dir = Path(out) if out else default_out(dirs)
    compare_runs(dirs, out_dir, cfg)
    print(out_dir / "comparisons")
    return 0
