"""Comparing runs (the `compare` command, `study/commands.py`, and the end of a sweep): the
same causal variable across runs of one task (architectures, seeds, checkpoints), read through
each run's DAS alignment.

The application's part of `study.analyses.compare`: it opens each run (`study.open_run`),
loads its networks (frozen, on the chosen device) at the checkpoints that have das alignments
(`RUN/analyses/das/alignments*.safetensors`; at `compare.site=atlas` the atlas's,
`RUN/analyses/atlas/alignments*.safetensors`), groups them by task, calls
`study.analyses.compare.compare` and writes the tables
- whole, to `OUT/comparisons/<table>.parquet` (OUT: the sweep's report directory, or `out=`);
- per run, to `RUN/analyses/compare/<table>.parquet` (the rows whose `run` is that run), so
  any report of those run directories draws them (reports read run directories only).
A later comparison of a run with other runs replaces its rows there.
"""
from __future__ import annotations

import io
import logging
from dataclasses import fields
from pathlib import Path

from study.core.errors import UsageError
from study.core import tables as schemas

_log = logging.getLogger(__name__)

TABLES = tuple(t.name for t in schemas.of_analysis("compare"))


def compare_config(overrides: dict[str, str]):
    """The comparisons' settings from `compare.FIELD` = text pairs, each checked."""
    from study.analyses.compare import CompareConfig
    from study.core.coerce import coerce, field_types
    types = field_types(CompareConfig)
    values = {}
    for key, text in overrides.items():
        name = key.removeprefix("compare.")
        if name not in types:
            raise UsageError(f"compare: unknown setting {key!r}; valid: "
                             f"{', '.join('compare.' + f.name for f in fields(CompareConfig))}")
        values[name] = coerce(key, text, types[name])
    return CompareConfig(**values)


def subjects_of(runs, device, cfg=None) -> dict[str, tuple]:
    """task fingerprint -> (task, [Subject]) for every checkpoint with das alignments of
    `runs` (the directory as given -> the run opened with `study.open_run`); at
    compare.site=atlas (`cfg`), with atlas alignments, every run's atlas checked before any
    network is loaded (`study.analyses.compare.sites.atlas_cells`)."""
    from study.analyses.compare import Subject
    from study.analyses.compare.sites import ATLAS, atlas_cells, check_atlas, no_atlas
    from study.analyses.subspaces.geometry import alignment_files

    atlas = cfg is not None and cfg.site == ATLAS
    found = []
    for run_dir, run in runs.items():
        steps = run.checkpoints
        files = alignment_files(run.path, "atlas" if atlas else "das")
        if atlas and not files:
            raise no_atlas(run_dir, "has no atlas (analyses/atlas/alignments.safetensors)")
        for step, path in files:
            if step is None or step not in steps:
                _log.info(f"compare: {path} names no checkpoint of {run_dir}; skipped")
                continue
            if atlas:
                check_atlas(atlas_cells(path, int(step), cfg.alignment, run_dir),
                            cfg.variables, run_dir)
            found.append((run_dir, run, int(step), path))
    groups: dict[str, tuple] = {}
    for run_dir, run, step, path in found:
        task = run.task
        groups.setdefault(task.fingerprint(), (task, []))[1].append(
            Subject(run_dir, run.config.model, step, run.model(step, device), path))
    return groups


def compare_runs(runs, out_dir, cfg=None, device=None) -> dict:
    """Compare the runs (run directories, or runs opened with `study.open_run`); write the
    tables (see the module docstring); returns them. Every directory is opened (and so
    checked) before any work."""
    import pandas as pd

    from study.analyses.compare import CompareConfig, compare
    from study.train.runtime import resolve_device
    from study.run.handle import Run, open_run

    runs = {str(r.path) if isinstance(r, Run) else str(r): r if isinstance(r, Run) else open_run(r)
            for r in runs}
    cfg = cfg or CompareConfig()
    device = resolve_device(device, key="device")
    tables: dict[str, list] = {t: [] for t in TABLES}
    for task, subjects in subjects_of(runs, device, cfg).values():
        for name, df in compare(subjects, task, cfg, device).items():
            tables[name].append(df)
    out = {n: pd.concat(p, ignore_index=True) if p else pd.DataFrame() for n, p in tables.items()}
    _write(out, Path(out_dir) / "comparisons")
    for run_dir in runs:
        mine = {n: df[df["run"] == run_dir] for n, df in out.items() if not df.empty}
        if any(len(df) for df in mine.values()):
            _write(mine, Path(run_dir) / "analyses" / "compare")
    return out


def _write(tables: dict, folder: Path) -> None:
    from study.core.atomic import new_folder
    from study.core.rundir import atomic_write_bytes
    with new_folder(folder):  # a failed write (a full disk) leaves no folder of its own behind
        for name, df in tables.items():
            buf = io.BytesIO()
            df.reset_index(drop=True).to_parquet(buf, index=False)
            atomic_write_bytes(folder / f"{name}.parquet", buf.getvalue())

