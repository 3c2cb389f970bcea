"""Run registered analyses on a run directory's checkpoint; tables go to
`RUN_DIR/analyses/<name>/<table>.parquet` (atomic), artefacts beside them."""
from __future__ import annotations

import sys

from study.core import registry
from study.config import check_analyses, from_dict, group_config
from study.core.errors import UsageError
from study.core.rundir import RunDir


def _split_overrides(names, overrides: dict[str, str]) -> dict[str, dict[str, str]]:
    per = {n: {} for n in names}
    for key, value in overrides.items():
        head = key.split(".", 1)[0]
        if head not in per or "." not in key:
            raise UsageError(f"unknown key {key!r}; analysis settings are NAME.FIELD for one of {', '.join(names)}")
        per[head][key] = value
    return per


def validate(rd: RunDir, names, overrides: dict[str, str]) -> None:
    """Refuse unknown analyses, unsupported architectures and bad settings before any work."""
    cfg = from_dict(rd.config())
    check_analyses(names, registry.get("model", cfg.model))
    for name, kv in _split_overrides(names, overrides).items():
        group_config(registry.get("analysis", name), cfg.scale, kv, name)


def analyze(rd: RunDir, names, overrides: dict[str, str], checkpoint: str | int = "final") -> None:
    import pandas as pd
    import torch

    from analyses.common.context import AnalysisContext
    from study.train.checkpoint import load_model

    validate(rd, names, overrides)
    cfg = from_dict(rd.config())
    per = _split_overrides(names, overrides)
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    model, meta = load_model(rd.path, checkpoint)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    model_entry = registry.get("model", cfg.model)
    for name in names:
        entry = registry.get("analysis", name)
        acfg = group_config(entry, cfg.scale, per[name], name)
        out = rd.analysis_dir(name)
        out.mkdir(parents=True, exist_ok=True)
        print(f"analysis {name} on {rd.path} (step {meta['step']})", file=sys.stderr, flush=True)
        ctx = AnalysisContext(model, task, acfg, cfg.model, model_entry.capabilities, int(meta["step"]),
                              device, out, cfg.seed)
        tables = entry.obj(ctx)
        for table, df in tables.items():
            assert isinstance(df, pd.DataFrame), f"{name}.{table} is not a DataFrame"
            df = _merge_checkpoints(out / f"{table}.parquet", df, ctx.checkpoint)
            rd.write_parquet(f"analyses/{name}/{table}.parquet", df)


def _merge_checkpoints(path, df, step: int):
    """Tables of other checkpoints are kept, so `checkpoint=STEP` runs build trajectories."""
    import pandas as pd

    if "checkpoint" not in df.columns:
        df = df.assign(checkpoint=step)
    if path.exists():
        old = pd.read_parquet(path)
        if "checkpoint" in old.columns:
            df = pd.concat([old[old["checkpoint"] != step], df], ignore_index=True)
    return df
