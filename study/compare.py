"""`study compare RUN_DIR ... [out=DIR] [compare.FIELD=V]`: the same causal variable across
runs of one task (architectures, seeds, checkpoints), read through each run's DAS alignment.

The application's part of `study.analyses.compare`: it loads each run's networks at the
checkpoints that have das alignments (`RUN/analyses/das/alignments*.safetensors`), groups
them by task, calls `study.analyses.compare.compare` and writes the tables
- whole, to `OUT/comparisons/<table>.parquet` (OUT: the sweep's report directory, or `out=`);
- per run, to `RUN/analyses/compare/<table>.parquet` (the rows whose `run` is that run), so
  any report of those run directories draws them (reports read run directories only).
A later comparison of a run with other runs replaces its rows there.
"""
from __future__ import annotations

import io
import sys
from dataclasses import fields
from pathlib import Path

from study.core.errors import UsageError
from study.core.settings import split_dirs_and_args

TABLES = ("compare_similarity", "compare_geometry", "compare_stitching")


def _config(overrides: dict[str, str]):
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


def subjects_of(run_dirs, device) -> dict[str, tuple]:
    """task fingerprint -> (task, [Subject]) for every run checkpoint with das alignments."""
    from study.analyses.compare import Subject
    from study.analyses.subspaces.geometry import alignment_files
    from study.train.checkpoint import list_checkpoints, load_model, load_task

    groups: dict[str, tuple] = {}
    for run_dir in run_dirs:
        steps = list_checkpoints(run_dir)
        for step, path in alignment_files(Path(run_dir)):
            if step is None or step not in steps:
                print(f"compare: {path} names no checkpoint of {run_dir}; skipped", file=sys.stderr)
                continue
            model, meta = load_model(run_dir, step, device)
            for p in model.parameters():
                p.requires_grad_(False)
            task = load_task(meta)
            key = task.fingerprint()
            groups.setdefault(key, (task, []))[1].append(
                Subject(str(run_dir), str(meta["model"]), int(step), model, path))
    return groups


def compare_runs(run_dirs, out_dir, cfg=None, device=None) -> dict:
    """Compare the runs; write the tables (see the module docstring); returns them."""
    import pandas as pd
    import torch

    from study.analyses.compare import CompareConfig, compare

    cfg = cfg or CompareConfig()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tables: dict[str, list] = {t: [] for t in TABLES}
    for task, subjects in subjects_of(run_dirs, device).values():
        for name, df in compare(subjects, task, cfg, device).items():
            tables[name].append(df)
    out = {n: pd.concat(p, ignore_index=True) if p else pd.DataFrame() for n, p in tables.items()}
    _write(out, Path(out_dir) / "comparisons")
    for run_dir in dict.fromkeys(str(r) for r in run_dirs):
        mine = {n: df[df["run"] == run_dir] for n, df in out.items() if not df.empty}
        if any(len(df) for df in mine.values()):
            _write(mine, Path(run_dir) / "analyses" / "compare")
    return out


def _write(tables: dict, folder: Path) -> None:
    from study.core.rundir import atomic_write_bytes
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        buf = io.BytesIO()
        df.reset_index(drop=True).to_parquet(buf, index=False)
        atomic_write_bytes(folder / f"{name}.parquet", buf.getvalue())


def cmd_compare(args: list[str]) -> int:
    dirs, overrides = split_dirs_and_args(args)
    out = overrides.pop("out", None)
    if not dirs:
        raise UsageError("usage: compare RUN_DIR [RUN_DIR ...] [out=DIR] [compare.FIELD=V]")
    for d in dirs:
        if not (Path(d) / "config.json").is_file():
            raise UsageError(f"RUN_DIR {d!r} is not a run directory (no config.json)")
    cfg = _config(overrides)
    from study.reports.write import default_out
    out_dir = Path(out) if out else default_out(dirs)
    compare_runs(dirs, out_dir, cfg)
    print(out_dir / "comparisons")
    return 0
