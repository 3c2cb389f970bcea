"""Run registered analyses on a run directory's checkpoint; tables go to
`RUN_DIR/analyses/<name>/<table>.parquet` (atomic), artefacts beside them.

Analysing holds the run directory's claim (a no-op inside `run`, which holds it already); a
damaged table or alignment file found there is set aside as `NAME.damaged` and recomputed."""
from __future__ import annotations

import sys

from study.config import analysis_configs, from_dict, json_settings
from study.core import registry
from study.core.claim import claim
from study.core.damage import set_aside_damaged
from study.core.diskfull import reporting_disk_full
from study.core.errors import UsageError
from study.core.rundir import RunDir
from study.runstate import SETTINGS

META_KEYS = ("model", "model_config", "vocab_size", "seq_len", "step")


def run_config(rd: RunDir):
    """The run's config, a one-line error when config.json has the wrong shape."""
    try:
        return from_dict(rd.config(), f"{rd.path}/config.json")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{rd.config_path} is damaged ({type(e).__name__}: {e}); delete it and "
                         "re-run the `run` command that made this run") from None


def resolve_analyses(rd: RunDir, names, overrides: dict[str, str]) -> dict:
    """The analyses' configs for a run directory (its scale, task and model), every setting
    checked before any work: unknown analyses, unsupported architectures, bad values."""
    cfg = run_config(rd)
    return analysis_configs(tuple(names), cfg.scale, overrides, registry.get("task", cfg.task),
                            registry.get("model", cfg.model), cfg.model_config)


def _check_meta(rd: RunDir, checkpoint) -> None:
    """meta.json of the checkpoint to load names everything needed to rebuild the model."""
    from study.train.checkpoint import META, resolve_step
    ckpt = resolve_step(rd.path, checkpoint)
    rel = ckpt.relative_to(rd.path)
    RunDir(rd.path).read_json(str(rel / META), META_KEYS,
                              f"delete {ckpt} to fall back to an earlier checkpoint, or re-run with force=true")


def analyze(rd: RunDir, configs: dict, checkpoint: str | int = "final",
            trajectory: bool = True) -> None:
    """Run each analysis (name -> its resolved config) on the run's checkpoint, holding the
    run directory's claim. `trajectory=False` hides the earlier checkpoints from the analyses
    (`AnalysisContext.steps` empty): the caller analyses those steps one by one itself."""
    with reporting_disk_full(rd.path), claim(rd.path, "analyze"):
        for tmp in rd.clean_temporaries():
            print(f"notice: removed {tmp}, left by an interrupted write", file=sys.stderr, flush=True)
        for folder in sorted(rd.path.glob("analyses/*")):
            set_aside_damaged(folder, "; the analysis that wrote it runs again when asked")
        _analyze(rd, configs, checkpoint, trajectory)


def _analyze(rd: RunDir, configs: dict, checkpoint: str | int, trajectory: bool) -> None:
    import pandas as pd
    import torch

    from study.analyses.common.context import AnalysisContext
    from study.train.checkpoint import list_checkpoints, load_model

    cfg = run_config(rd)
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    _check_meta(rd, checkpoint)
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
    for name, acfg in configs.items():
        entry = registry.get("analysis", name)
        out = rd.analysis_dir(name)
        out.mkdir(parents=True, exist_ok=True)
        print(f"analysis {name} on {rd.path} (step {meta['step']})", file=sys.stderr, flush=True)
        ctx = AnalysisContext(model, task, acfg, cfg.model, int(meta["step"]),
                              device, out, cfg.seed, model_at=model_at,
                              steps=tuple(list_checkpoints(rd.path)) if trajectory else ())
        tables = entry.obj(ctx)
        for table, df in tables.items():
            assert isinstance(df, pd.DataFrame), f"{name}.{table} is not a DataFrame"
            df = _merge_checkpoints(out / f"{table}.parquet", df, ctx.checkpoint)
            rd.write_parquet(f"analyses/{name}/{table}.parquet", df)
        rd.write_json(f"analyses/{name}/{SETTINGS}", json_settings(acfg))


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
