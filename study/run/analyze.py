"""Run registered analyses on a checkpoint of a run opened with the run handle
(`study.open_run`, which builds its task, loads the network frozen and picks the device);
tables go to `RUN_DIR/analyses/<name>/<table>.parquet` (atomic), artefacts beside them.

Analysing holds the run directory's claim (a no-op inside `run`, which holds it already); a
damaged table or alignment file found there is set aside as `NAME.damaged` and recomputed.
Each analysis writes into a copy of its folder that replaces the folder whole only once its
tables are written (`staged`): a re-analysis that fails or is interrupted leaves the
previous outputs as they were. An analysis's work in progress (`partial/`,
`study.analyses.common.context.PARTIAL`: das's training snapshots) is kept across an
interruption and removed once its tables are written.
Each analysis is a timed stage (`study/core/progress.py`): its wall time goes to the log when
it ends, and a line at least every 30 s while it runs."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

from study.run.handle import Run
from study.run.config import json_settings
from study.core import registry
from study.core.atomic import atomic_dir
from study.core.claim import claim
from study.core.damage import set_aside_damaged
from study.core.diskfull import reporting_disk_full
from study.core.errors import UsageError
from study.core.progress import timed
from study.core.tables import check_outputs, of_analysis
from study.run.runstate import SETTINGS

_log = logging.getLogger(__name__)


def analyze(run: Run, configs: dict, checkpoint: str | int = "final",
            trajectory: bool = True) -> None:
    """Run each analysis (name -> its resolved config, `Run.analysis_configs`) on the opened
    run's checkpoint, holding the run directory's claim. `trajectory=False` hides the earlier
    checkpoints from the analyses (`AnalysisContext.steps` empty): the caller analyses those
    steps one by one itself."""
    rd = run.rundir
    with reporting_disk_full(rd.path), claim(rd.path, "analyze"):
        for tmp in rd.clean_temporaries():
            _log.info(f"notice: removed {tmp}, left by an interrupted write")
        for folder in sorted(rd.path.glob("analyses/[!.]*")):
            set_aside_damaged(folder, "; the analysis that wrote it runs again when asked")
        _analyze(run, configs, checkpoint, trajectory)


def _analyze(run: Run, configs: dict, checkpoint: str | int, trajectory: bool) -> None:
    import pandas as pd

    from study.analyses.common.context import AnalysisContext

    rd, cfg, task = run.rundir, run.config, run.task
    from study.train.runtime import resolve_device
    device = resolve_device(key="device")

    def model_at(step):  # AnalysisContext.model_at: LookupError for a missing checkpoint
        try:
            return run.model(step, device)
        except UsageError as e:
            raise LookupError(str(e)) from None

    model, step = run.model(checkpoint, device), run.step(checkpoint)
    for name, acfg in configs.items():
        entry = registry.get("analysis", name)
        out = rd.analysis_dir(name)
        _log.info(f"analysis {name} on {rd.path} (step {step})")
        with timed(f"analysis {name}", _log), staged(out) as stage:
            ctx = AnalysisContext(model, task, acfg, cfg.model, step, device, stage, cfg.seed,
                                  model_at=model_at,
                                  steps=tuple(run.checkpoints) if trajectory else (),
                                  analysis_dir=rd.analysis_dir)
            tables = entry.obj(ctx)
            if of_analysis(name):  # a declared analysis writes exactly its declared tables
                check_outputs(name, tables)
            here = stage.relative_to(rd.path)
            for table, df in tables.items():
                assert isinstance(df, pd.DataFrame), f"{name}.{table} is not a DataFrame"
                df = _merge_checkpoints(out / f"{table}.parquet", df, ctx.checkpoint)
                rd.write_parquet(f"{here}/{table}.parquet", df)
            rd.write_json(f"{here}/{SETTINGS}", json_settings(acfg))


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A folder beside an analysis's folder `out` for the analysis to write its tables and
    artefacts in, holding what `out` holds (hard links: every file is replaced by a rename,
    never written in place), swapped in for `out` whole when the block ends without error
    (`study.core.atomic.atomic_dir`), as training swaps in a checkpoint: a re-analysis that
    fails or is interrupted leaves the previous tables, alignments and settings as they
    were. Its work in progress (`PARTIAL`) is the one folder written in place, under `out`
    (the staged folder links to it), so that an interrupted analysis continues; once the
    tables are swapped in it is gone with the old folder."""
    from study.analyses.common.context import PARTIAL

    partial = out / PARTIAL
    had_out, had_partial = out.is_dir(), partial.is_dir()
    partial.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_dir(out) as stage:
            for item in out.iterdir():
                if item.name == PARTIAL:
                    continue
                if item.is_dir() and not item.is_symlink():
                    shutil.copytree(item, stage / item.name, copy_function=_link_or_copy,
                                    symlinks=True)
                else:
                    _link_or_copy(item, stage / item.name)
            (stage / PARTIAL).symlink_to(partial.resolve(), target_is_directory=True)
            yield stage
            (stage / PARTIAL).unlink()  # the old folder, swapped out, takes it away
    except BaseException:
        if not had_partial and partial.is_dir() and not any(partial.iterdir()):
            partial.rmdir()  # nothing to continue from: no sign of an interrupted search
            if not had_out and not any(out.iterdir()):
                out.rmdir()  # a first analysis that failed leaves no folder of its own
        raise


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(src, dst, follow_symlinks=False)


def _merge_checkpoints(path, df, step: int):
    """Tables of other checkpoints are kept, so `checkpoint=STEP` runs build trajectories;
    the rows of every checkpoint the new table holds are replaced (a table whose rows name
    another checkpoint, as `das_control`'s step-0 rows, replaces those)."""
    import pandas as pd

    if "checkpoint" not in df.columns:
        df = df.assign(checkpoint=step)
    if path.exists():
        old = pd.read_parquet(path)
        if "checkpoint" in old.columns:
            df = pd.concat([old[~old["checkpoint"].isin(set(df["checkpoint"]))], df],
                           ignore_index=True)
    return df
