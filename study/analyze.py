"""Run registered analyses on a run directory's checkpoint; tables go to
`RUN_DIR/analyses/<name>/<table>.parquet` (atomic), artefacts beside them."""
from __future__ import annotations

import sys

from study.core import registry
from study.config import analysis_configs, from_dict
from study.core.rundir import RunDir


def resolve_analyses(rd: RunDir, names, overrides: dict[str, str]) -> dict:
    """The analyses' configs for a run directory (its scale, task and model), every setting
    checked before any work: unknown analyses, unsupported architectures, bad values."""
    cfg = from_dict(rd.config(), f"{rd.path}/config.json")
    return analysis_configs(tuple(names), cfg.scale, overrides, registry.get("task", cfg.task),
                            registry.get("model", cfg.model), cfg.model_config)


def analyze(rd: RunDir, configs: dict, checkpoint: str | int = "final") -> None:
    """Run each analysis (name -> its resolved config) on the run's checkpoint."""
    import pandas as pd
    import torch

    from analyses.common.context import AnalysisContext
    from study.train.checkpoint import load_model

    cfg = from_dict(rd.config(), f"{rd.path}/config.json")
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def load(step):  # the network at a logged step, frozen on `device`
        net, info = load_model(rd.path, step)
        net = net.to(device).eval()
        for p in net.parameters():
            p.requires_grad_(False)
        return net, info

    def model_at(step):  # AnalysisContext.model_at: LookupError for a missing checkpoint
        from study.core.errors import UsageError
        try:
            return load(step)[0]
        except UsageError as e:
            raise LookupError(str(e)) from None

    model, meta = load(checkpoint)
    model_entry = registry.get("model", cfg.model)
    for name, acfg in configs.items():
        entry = registry.get("analysis", name)
        out = rd.analysis_dir(name)
        out.mkdir(parents=True, exist_ok=True)
        print(f"analysis {name} on {rd.path} (step {meta['step']})", file=sys.stderr, flush=True)
        ctx = AnalysisContext(model, task, acfg, cfg.model, model_entry.capabilities, int(meta["step"]),
                              device, out, cfg.seed, model_at=model_at)
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
