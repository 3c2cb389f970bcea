"""Run one resolved config end to end: run directory → data → training → analyses.

Re-running the same command resumes an interrupted run and skips a finished one (unless
`force=true`); a run directory that holds a *different* config is refused, not overwritten.
The run holds its directory's claim from the first write to the report, so a second process
on the same directory is refused instead of deleting checkpoints under the first. What it says
goes to the `study.run.runner` logger (`study/core/logs.py`) and into the run's `run.log`, with the
wall time of each stage (data, training, each analysis, the report) and their sum.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

from study.analyses.common.context import PARTIAL
from study.core import registry
from study.run.build import build_task
from study.run.handle import open_run
from study.run.config import RunConfig, identity_of
from study.run import runstate
from study.core import placement, runlog
from study.core.logs import LOG_ONLY, STAMPED
from study.core.progress import stage_times, timed
from study.core.claim import claim
from study.core.damage import readable, set_aside, set_aside_damaged
from study.core.diskfull import ignore_disk_full, reporting_disk_full
from study.core.errors import UsageError
from study.core.rundir import RunDir, jsonable
from study.core.signals import signal_name, signum_of
from study.core.settings import runtime_fields


_log = logging.getLogger(__name__)


def log(msg: str) -> None:
    """A line under the `study` logger (the terminal and the run's log show it)."""
    _log.info(msg)


def prepare(cfg: RunConfig, rd: RunDir | None = None) -> RunDir:
    """Create (or reopen) the run directory, whose claim the caller holds; refuse one whose
    config or checkpoints belong to other settings unless `force=true` (which clears only
    what a run wrote)."""
    rd = rd or RunDir(placement.check(cfg.path))
    rd.path.mkdir(parents=True, exist_ok=True)
    for tmp in rd.clean_temporaries():
        log(f"notice: removed {tmp}, left by an interrupted write")
    difference = _difference(rd, cfg)
    if difference and not cfg.force:
        raise UsageError(f"run_dir={rd.path} holds {difference}; choose another run_dir or pass "
                         "force=true to replace it")
    if difference or (cfg.force and rd.status() == "done"):
        kept = placement.left_by_clear(rd.path)  # checked before anything is cleared or written
        if kept:
            raise UsageError(f"force=true cannot clear {kept[0]}: it is a symlink (to "
                             f"{os.path.realpath(kept[0])}), which clearing never follows; "
                             f"remove or re-point it yourself, or choose another run_dir; "
                             f"nothing was changed")
        placement.clear(rd.path)
    damaged_status = (rd.path / "status.json").exists() and rd.status() is None
    if (rd.marker() or {}).get("hash") != cfg.hash8():  # new, or cleared by force=true
        rd.write_marker(cfg.hash8())
    rd.write_json("config.json", cfg.to_dict())
    if damaged_status:
        log(f"notice: {rd.path / 'status.json'} was damaged; the checkpoints decide whether to "
            "resume or skip training")
    if rd.status() is None:
        rd.set_status("created")
    return rd


def _difference(rd: RunDir, cfg: RunConfig) -> str | None:
    """How the run directory's settings differ from `cfg` (None: same run, or a new one).
    config.json is compared first; without it the marker's config hash, and without that the
    newest checkpoint's meta.json, say what the weights were trained with. Runtime-only
    settings (`runtime.device`, ...) are no part of a run's identity and may differ."""
    want = jsonable(cfg.identity())
    marker = rd.marker() or {}
    if rd.exists():
        old = rd.config()
        have = identity_of(old)
        keys = [_differing(k, have[k], want[k]) for k in want if have[k] != want[k]]
        if keys:
            return f"a run with a different config ({', '.join(keys)})"
        if marker.get("hash") not in (None, cfg.hash8()):
            return (f"checkpoints of another config (its marker says config {marker['hash']}, "
                    f"config.json says {cfg.hash8()}: config.json was replaced)")
        return None
    if marker.get("hash") not in (None, cfg.hash8()):
        return (f"checkpoints trained with another config ({marker['hash']}; these settings are "
                f"{cfg.hash8()}) and its config.json is gone")
    from study.train import checkpoint as ckpt
    steps = ckpt.list_checkpoints(rd.path)
    if steps:
        meta = ckpt.read_meta(ckpt.checkpoints_dir(rd.path) / ckpt.dir_name(steps[-1]))
        keys = [k for k in ("task", "task_config", "model", "model_config", "seed")
                if meta.get(k) != want[k]]
        if keys:
            return f"checkpoints trained with a different {', '.join(keys)} and its config.json is gone"
    return None


def _differing(key: str, have, want) -> str:
    """`key`, with the fields that differ when it is a group: "train (lr, steps)"."""
    if isinstance(have, dict) and isinstance(want, dict):
        fields = [f for f in sorted(set(have) | set(want)) if have.get(f) != want.get(f)]
        return f"{key} ({', '.join(fields)})"
    return key


def prepare_data(task) -> dict[str, int]:
    """Build (or load from the cache) every split the run uses; returns sizes."""
    names = ["train", *task.eval_splits]
    return {name: len(task.split(name)) for name in dict.fromkeys(names) if name in task.splits}


def run(cfg: RunConfig) -> RunDir:
    """Train (or resume, or skip), analyse and report one run, holding its directory's claim
    throughout; a full disk anywhere in it is one line naming the file."""
    rd = RunDir(placement.check(cfg.path))  # before anything is written
    with reporting_disk_full(rd.path):
        rd.path.mkdir(parents=True, exist_ok=True)
        with claim(rd.path, "run"):
            prepare(cfg, rd)  # a refusal (another run's folder, a damaged config) comes before run.log
            _logged(cfg, rd)
    return rd


def _logged(cfg: RunConfig, rd: RunDir) -> None:
    """The run, what it says kept in run.log with the time of each stage."""
    with runlog.kept(rd.path / "run.log"):
        _log.info(f"{cfg.task} × {cfg.model} seed {cfg.seed} on {socket.gethostname()} "
                  f"(pid {os.getpid()}) → {rd.path}", extra=STAMPED)
        try:
            with stage_times(_log) as times:
                _run(cfg, rd)
            _record_times(rd, times)
        except (KeyboardInterrupt, UsageError):
            raise
        except BaseException as e:  # the traceback stays in run.log (the terminal gets it anyway)
            _log.error(f"failed: {type(e).__name__}: {e}", exc_info=True, extra=LOG_ONLY)
            raise


def _record_times(rd: RunDir, times: list[tuple[str, float]]) -> None:
    """Append this session's stage times (seconds) to `times.json`, which a study's result
    folder reports as each run's wall time (`python -m study results`)."""
    try:
        sessions = rd.read_json("times.json").get("sessions", [])
    except Exception:  # noqa: BLE001 - none yet, or damaged: this session starts it again
        sessions = []
    sessions.append({"host": socket.gethostname(), "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "stages": {n: round(s, 3) for n, s in times},
                     "total_s": round(sum(s for _, s in times), 3)})
    rd.write_json("times.json", {"sessions": sessions})


def _run(cfg: RunConfig, rd: RunDir) -> None:
    from study.run.env import environment
    # this session's runtime-only settings, which may differ from the run's first session
    runtime = {k: getattr(cfg.train, k) for k in runtime_fields(type(cfg.train))}
    rd.write_json("env.json", {**environment(), "train_runtime": runtime})
    task = build_task(cfg)
    t0 = time.time()
    with timed("data", _log):
        sizes = prepare_data(task)
        log(f"data: {', '.join(f'{k} {v:,}' for k, v in sizes.items())} ({time.time() - t0:.1f} s)")
    write_task_tables(rd, task)
    try:
        if rd.status() == "done" and _summary_readable(rd) and _checkpoints_readable(rd):
            log(f"{rd.path}: already finished (force=true retrains)")
            for line in _finished_damage(rd):
                log(f"notice: {line}")
        else:  # a finished run with a damaged summary.json: training sees it is done, rewrites it
            rd.set_status("running")
            try:
                with timed("training", _log):
                    _train(cfg, rd, task)
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                ignore_disk_full(rd.set_status, "failed", error=f"{type(e).__name__}: {e}")
                raise
        _analyses(cfg, rd)
    except KeyboardInterrupt as e:  # Ctrl-C or a stop signal: training wrote a resume point
        name = signal_name(signum_of(e))
        ignore_disk_full(rd.set_status, "interrupted", signal=name,
                         error=f"interrupted by {name}; re-run the same command to resume")
        # for the log alone: the terminal gets the command's own line
        _log.info(f"interrupted by {name}", extra=LOG_ONLY)
        raise
    rd.set_status("done")
    write_report(rd)


def _finished_damage(rd: RunDir) -> list[str]:
    """What a finished run lacks that skipping its training leaves as it is: its training
    curves (metrics.parquet) and the meta.json of its checkpoints (the weights' record),
    each in a line saying what it costs and what rebuilds it."""
    from study.core.damage import readable
    from study.train import checkpoint as ckpt
    out = []
    if not rd.metrics_path.is_file() or not readable(rd.metrics_path):
        what = "missing" if not rd.metrics_path.is_file() else "damaged"
        out.append(f"{rd.metrics_path} is {what}: the report has no training curves; "
                   f"restore it, or retrain with force=true")
    for step in ckpt.list_checkpoints(rd.path):
        folder = ckpt.checkpoints_dir(rd.path) / ckpt.dir_name(step)
        try:
            ckpt.read_meta(folder)
        except ckpt.CheckpointError:
            out.append(f"{folder / ckpt.META} is missing or damaged: that checkpoint cannot "
                       f"be analysed; delete {folder} or retrain with force=true")
    return out


def _summary_readable(rd: RunDir) -> bool:
    import json
    try:
        return isinstance(json.loads(rd.summary_path.read_text()), dict)
    except (OSError, ValueError):
        return False


def _checkpoints_readable(rd: RunDir) -> bool:
    """Whether every logged checkpoint's weights of a finished run open. A damaged final
    checkpoint is named and retrained from the training state before it (`train.resume`),
    to the same weights on CPU; a damaged earlier one, which no kept state can remake, is a
    CheckpointError naming it."""
    from study.train import checkpoint as ckpt
    steps = ckpt.list_checkpoints(rd.path)
    for step in steps:
        try:
            ckpt.check_weights(ckpt.checkpoints_dir(rd.path) / ckpt.dir_name(step))
        except ckpt.CheckpointError as e:
            if step != steps[-1]:
                raise
            log(f"notice: the final checkpoint's {ckpt.WEIGHTS} is damaged "
                f"({ckpt.checkpoints_dir(rd.path) / ckpt.dir_name(step) / ckpt.WEIGHTS}: "
                f"{e.reason}); retraining it from the training state before it")
            return False
    return True


def write_task_tables(rd: RunDir, task) -> None:
    """`heuristics.parquet`: the task's shortcut rules scored on its test split, and
    `reference.parquet`: a published run's curves on its eval splits, for reports."""
    _task_table(rd, "heuristics.parquet", lambda: task.heuristics("test"),
                {"stratum": str, "value": str})
    _task_table(rd, "reference.parquet", task.reference_curves, {"split": str})


def _task_table(rd: RunDir, name: str, rows_of, types: dict) -> None:
    """Write the task's rows as `name` unless a readable copy is there; none if no rows."""
    path = rd.path / name
    if path.exists():
        if readable(path):
            return
        log(f"notice: {path} is damaged; moved it to {set_aside(path).name} and rebuilt it from the task")
    rows = rows_of()
    if rows:
        import pandas as pd
        rd.write_parquet(name, pd.DataFrame(rows).astype(types))


def write_report(rd: RunDir) -> None:
    from study.reports.write import write_run_report
    with timed("report", _log):
        path = write_run_report(rd.path)
    log(f"report: {path}")


def _train(cfg: RunConfig, rd: RunDir, task) -> None:
    from study.train.loop import train
    model_entry = registry.get("model", cfg.model)
    summary = train(rd, task, model_entry, cfg.model_config, cfg.train, cfg.seed)
    acc = summary.get("test_accuracy")
    log(f"trained {cfg.model} on {cfg.task}: " + (f"test accuracy {acc:.4f}" if acc is not None else "done")
        + _smoke_note(cfg, acc))


def _smoke_note(cfg: RunConfig, acc) -> str:
    """Said after a smoke run's accuracy when it did not learn: smoke presets check that the
    code runs, in seconds; they are not meant to learn (examples/smoke.toml's settings do)."""
    from study.claims.learnt import LEARNED_ACC
    if cfg.scale != "smoke" or acc is None or acc >= LEARNED_ACC:
        return ""
    return (" (smoke scale: not meant to learn; the README's quick start and "
            "examples/smoke.toml give settings that do)")


def _supersede(rd: RunDir, name: str) -> Path:
    """Move analysis `name`'s folder to `superseded/<name>-<n>` (outside `study/analyses/`, so
    reports never read it); returns where."""
    (rd.path / "superseded").mkdir(exist_ok=True)
    n = 1
    while (target := rd.path / "superseded" / f"{name}-{n}").exists():
        n += 1
    rd.analysis_dir(name).replace(target)
    return target


def _analyses(cfg: RunConfig, rd: RunDir) -> None:
    """Run the requested analyses that have no tables yet (a re-run skips finished ones)."""
    for name in cfg.analyses:  # a damaged table counts as missing: set aside, then recomputed
        set_aside_damaged(rd.analysis_dir(name), "; recomputing it")
    for name, asked in cfg.analysis_settings().items():  # made with other settings: moved
        change = asked is not None and runstate.settings_change(rd, name, asked)
        if change:
            kept = _supersede(rd, name)
            log(f"analysis {name}: asked with other settings than its tables were made with "
                f"({change}); recomputing it, the old tables kept in {kept}")
    todo = []
    for name in cfg.analyses:  # every table it writes, or it runs again whole
        missing = runstate.missing_outputs(rd, name)
        if missing and rd.analysis_dir(name).is_dir() and any(rd.analysis_dir(name).iterdir()):
            how = ("continuing it from its snapshots (partial/)"
                   if (rd.analysis_dir(name) / PARTIAL).is_dir() else "recomputing it")
            log(f"analysis {name}: {', '.join(missing)} missing; {how}")
        if missing:
            todo.append(name)
    if todo:
        from study.run.analyze import analyze
        analyze(open_run(rd.path), {n: cfg.analysis_configs[n] for n in todo})
