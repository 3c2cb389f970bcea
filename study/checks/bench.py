"""`python -m study bench train|das|atlas|emergence key=value ...`: speed of the hot loops
against a naive baseline measured in the same process (atlas: the cost of one network's atlas,
stage by stage, `study/checks/bench_atlas.py`; emergence: one variable followed over 10
checkpoints against one full search of the atlas, `study/checks/bench_emergence.py`), written
as a Markdown table (and CSV) and printed.

Absolute numbers on shared machines are noisy; the ratio to the baseline is the figure to read.
"""
from __future__ import annotations

import time
from pathlib import Path

from study.run.build import build_task
from study.core import registry
from study.core.coerce import coerce
from study.run.config import resolve
from study.core.errors import UsageError
from study.core.rundir import atomic_write_bytes
from study.core.settings import split_args
from study.core.markdown import markdown_table

DEFAULTS = {"train": {"task": "binding", "model": "gpt12"}, "das": {"task": "counting", "model": "gru"},
            "atlas": {"task": "binding", "model": "gru"},
            "emergence": {"task": "counting", "model": "gru"}}
# `model=all`: every family on the task of its paper (Wu et al.: gpt12 on binding; Exoo et al.:
# attn2 on assign_add; Grant et al.: the GRU, the LSTM and the 2-layer transformer on counting)
HOME_TASKS = {"gpt12": "binding", "attn2": "assign_add", "rope2": "counting", "gru": "counting",
              "lstm": "counting"}


def cmd_bench(args):
    if not args or args[0] not in DEFAULTS:
        raise UsageError("usage: bench train|das|atlas|emergence [task=NAME model=NAME "
                         "scale=... steps=N out=PATH] (atlas: atlas.KEY=VALUE ... measure=N; "
                         "emergence: atlas.KEY=VALUE emergence.KEY=VALUE ...)")
    main(args[0], split_args(args[1:]))


def main(kind: str, kv: dict[str, str]) -> Path:
    every = kv.get("model") == "all"
    if every and "task" in kv:
        raise UsageError("model=all benchmarks each family on its own paper's task; drop task=")
    kv = {**DEFAULTS[kind], **kv}
    steps = coerce("steps", kv.pop("steps", "30"), int)
    measure = coerce("measure", kv.pop("measure", "0"), int)  # atlas: variables measured
    if kind == "atlas":
        kv["analyses"] = "atlas"
    if kind == "emergence":
        kv["analyses"] = "atlas,emergence"
    if steps < 2:
        raise UsageError(f"steps={steps}: expected at least 2")
    out = Path(kv.pop("out", f"runs/bench/{kind}-{'all' if every else kv['task'] + '-' + kv['model']}"
                             f"-{time.strftime('%Y%m%d-%H%M%S')}.md"))
    pairs = [{**kv, "model": m, "task": t} for m, t in HOME_TASKS.items()] if every else [kv]
    configs = [resolve(p) for p in pairs]  # every setting checked before anything runs
    tables = [_one(kind, cfg, steps, measure) for cfg in configs]
    import pandas as pd
    table = pd.concat(tables, ignore_index=True)
    cfg = configs[0]
    what = "every family on its paper's task" if every else f"task={cfg.task} model={cfg.model}"
    header = (f"# bench {kind}: {what} scale={cfg.scale} "
              f"({time.strftime('%Y-%m-%d')})\n\n")
    atomic_write_bytes(out, (header + markdown_table(table) + "\n").encode())
    atomic_write_bytes(out.with_suffix(".csv"), table.to_csv(index=False).encode())
    print(header + markdown_table(table))
    print(f"\nwritten to {out}")
    return out


def _one(kind: str, cfg, steps: int, measure: int = 0):
    """One (task, model)'s bench table, with the task and model as its first columns."""
    task = build_task(cfg)
    model_entry = registry.get("model", cfg.model)
    from study.train.runtime import resolve_device
    device = str(resolve_device(cfg.train.device))
    if kind == "train":
        from study.checks.bench_train import bench_train
        table = bench_train(task, model_entry, cfg.model_config, cfg.train, steps=steps, device=device)
    elif kind == "atlas":
        from study.checks.bench_atlas import bench_atlas
        table = bench_atlas(task, model_entry, cfg.model_config, cfg.analysis_configs["atlas"],
                            measure=measure or None, device=device)
    elif kind == "emergence":
        from study.checks.bench_emergence import bench_emergence
        table = bench_emergence(task, model_entry, cfg.model_config, cfg.analysis_configs["atlas"],
                                cfg.analysis_configs["emergence"], device=device)
    else:
        from study.checks.bench_das import bench_das
        table = bench_das(task, model_entry, cfg.model_config, steps=steps, device=device)
    table.insert(0, "model", cfg.model)
    table.insert(0, "task", cfg.task)
    return table
