"""`python -m study bench train|das key=value ...`: speed of the hot loops against a naive
baseline measured in the same process, written as a Markdown table (and CSV) and printed.

Absolute numbers on shared machines are noisy; the ratio to the baseline is the figure to read.
"""
from __future__ import annotations

import time
from pathlib import Path

from study.core import registry
from study.core.coerce import coerce
from study.config import resolve
from study.core.errors import UsageError
from study.core.rundir import atomic_write_bytes
from reports.markdown import markdown_table

DEFAULTS = {"train": {"task": "binding", "model": "gpt12"}, "das": {"task": "counting", "model": "gru"}}


def main(kind: str, kv: dict[str, str]) -> Path:
    kv = {**DEFAULTS[kind], **kv}
    steps = coerce("steps", kv.pop("steps", "30"), int)
    if steps < 2:
        raise UsageError(f"steps={steps}: expected at least 2")
    out = Path(kv.pop("out", f"runs/bench/{kind}-{kv['task']}-{kv['model']}-{time.strftime('%Y%m%d-%H%M%S')}.md"))
    cfg = resolve(kv)
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    model_entry = registry.get("model", cfg.model)
    device = cfg.train.device
    if device == "auto":
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "train":
        from study.bench_train import bench_train
        table = bench_train(task, model_entry, cfg.model_config, cfg.train, steps=steps, device=device)
    else:
        from study.bench_das import bench_das
        table = bench_das(task, model_entry, cfg.model_config, steps=steps, device=device)
    header = (f"# bench {kind}: task={cfg.task} model={cfg.model} scale={cfg.scale} "
              f"({time.strftime('%Y-%m-%d')})\n\n")
    atomic_write_bytes(out, (header + markdown_table(table) + "\n").encode())
    atomic_write_bytes(out.with_suffix(".csv"), table.to_csv(index=False).encode())
    print(header + markdown_table(table))
    print(f"\nwritten to {out}")
    return out
