"""Training throughput: the engine's hot loop against a naive training loop, same process.

The naive loop is what a first script looks like: fp32, eager, the paper's batch, every
batch gathered on the CPU at the task's full padded length and copied to the device, plain
AdamW, `loss.item()` every step, logits at every position. It feeds the network the same
inputs as the engine (its own outputs where `train.feed_outputs` runs free), so that both
do the same work. The engine variant runs `study.train.engine.Engine` and the
engine's own data streams (device-resident, trimmed, shuffled by index; on CUDA bf16 autocast,
fused AdamW, torch.compile), optionally at a larger batch. Both are timed after warm-up steps
(which absorb compilation) between device synchronisations.

tokens_per_s counts the non-PAD tokens of the examples consumed, so both variants are
measured in the same unit of useful work and `ratio_vs_naive` compares tokens/s. The table
also gives how far each is from the machine (`study/run/flops.py`): `model_gflop_per_s` is tokens/s
times the model's forward + backward FLOPs per position, `peak_gflop_per_s` a square matmul
timed in the same process and threads in the row's precision (fp32, or bf16 where the variant
runs under bf16 autocast), `frac_of_peak` their ratio.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from study.run.flops import matmul_peak, train_flops_per_position
from study.train.streams import (OnTheFlyStream, ShuffledStream, auto_workers, loss_targets,
                                 to_width)
from study.train.engine import Engine
from study.train.feed import feed_mask, free_logits, runs_free
from study.train.meter import LossMeter
from study.train.runtime import sync, resolve_runtime
from study.train.schedule import lr_at
from study.train.config import TrainConfig
from study.core.labels import IGNORE


def _pool(task, n: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """(ids, labels, on_the_fly): the training split, or n sampled examples for tasks that
    sample their batches."""
    if task.train_batch(0, 1) is None:
        train = task.split("train")
        return train.ids, train.labels, False
    batches, got, k = [], 0, 0
    while got < n:
        ex = task.train_batch(k, min(4096, n - got))
        batches.append(ex)
        got, k = got + len(ex), k + 1
    return (np.concatenate([to_width(b.ids, task.seq_len, task.pad_id) for b in batches]),
            np.concatenate([to_width(b.labels, task.seq_len, IGNORE) for b in batches]), True)



def _naive(task, entry, model_cfg, cfg: TrainConfig, ids, labels, device, steps, warmup) -> float:
    """Seconds for `steps` naive steps."""
    torch.manual_seed(0)
    model = entry.obj(model_cfg, len(task.vocab), task.seq_len).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas),
                            weight_decay=cfg.weight_decay)
    ids, labels = ids[:65536], labels[:65536]  # enough to draw from; keeps host memory small
    ids_cpu = torch.from_numpy(to_width(ids, task.seq_len, task.pad_id))  # (n, seq_len) full width
    labels_cpu = torch.from_numpy(to_width(labels, task.seq_len, IGNORE))
    tgt_cpu = loss_targets(ids_cpu, labels_cpu, cfg.loss_on, task.pad_id)
    gen = torch.Generator().manual_seed(0)

    free = runs_free(cfg.feed_outputs, model)  # the same inputs as the engine's: own outputs
    feed_cpu = feed_mask(labels_cpu)  # (n, seq_len) bool, from the task's labels as training

    def one() -> float:
        idx = torch.randint(len(ids_cpu), (cfg.batch_size,), generator=gen)
        x, y = ids_cpu[idx].to(device), tgt_cpu[idx].to(device)  # (B, seq_len)
        logits = free_logits(model, x, feed_cpu[idx].to(device)) if free else model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        return loss.item()

    for _ in range(warmup):
        one()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        one()
    sync(device)
    return time.perf_counter() - t0


def _engine(task, entry, model_cfg, cfg: TrainConfig, ids, labels, on_the_fly, steps, warmup):
    """(seconds for `steps` engine steps, runtime, tokens per batch, positions per example)."""
    rt = resolve_runtime(cfg)
    torch.manual_seed(0)
    model = entry.obj(model_cfg, len(task.vocab), task.seq_len).to(rt.device).train()
    engine = Engine(model, cfg, rt, task.output_ids, len(task.vocab))
    if on_the_fly:
        stream = OnTheFlyStream(task, cfg.batch_size, cfg.steps, rt.device, cfg.loss_on,
                                auto_workers(cfg.data_workers, rt.device))
    else:
        stream = ShuffledStream(ids, labels, cfg.batch_size, 0, rt.device, cfg.loss_on, task.pad_id)
    meter = LossMeter(rt.device)
    try:
        for i in range(warmup):
            meter.add(*engine.step(*stream.batch(i), lr_at(cfg, i)))
        sync(rt.device)
        t0 = time.perf_counter()
        for i in range(warmup, warmup + steps):
            meter.add(*engine.step(*stream.batch(i), lr_at(cfg, i)))
        meter.state()  # the loop's one read-back
        sync(rt.device)
        return time.perf_counter() - t0, rt, stream.tokens_per_batch, stream.seq_len
    finally:
        stream.close()


def bench_train(task, model_entry, model_cfg, train_cfg: TrainConfig, steps: int, device: str, *,
                engine_batch_size: int | None = None, warmup: int | None = None,
                peak_seconds: float = 1.0) -> pd.DataFrame:
    """Steps/s and tokens/s of the naive loop and of the engine (at `engine_batch_size`, or
    the config's batch), and their model FLOP/s against a matmul peak. Columns: variant,
    device, threads, batch_size, seq_len, precision, compiled, steps_per_s, tokens_per_s,
    ratio_vs_naive, model_gflop_per_s, peak_gflop_per_s, frac_of_peak."""
    dev = torch.device(device)
    warmup = max(2, steps // 5) if warmup is None else warmup
    big = engine_batch_size or train_cfg.batch_size
    ids, labels, on_the_fly = _pool(task, max(train_cfg.batch_size, big) * 8)
    mean_tokens = float((ids != task.pad_id).sum()) / len(ids)

    secs = _naive(task, model_entry, model_cfg, train_cfg, ids, labels, dev, steps, warmup)
    naive_rate = steps / secs
    rows = [{"variant": "naive", "device": str(dev), "batch_size": train_cfg.batch_size,
             "seq_len": task.seq_len, "precision": "fp32", "compiled": False, "cuda_graphs": False,
             "steps_per_s": naive_rate, "tokens_per_s": naive_rate * train_cfg.batch_size * mean_tokens}]

    cfg = dataclasses.replace(train_cfg, device=str(dev), batch_size=big,
                              steps=max(train_cfg.steps, warmup + steps),
                              warmup_steps=min(train_cfg.warmup_steps, train_cfg.steps))
    secs, rt, tokens_per_batch, used = _engine(task, model_entry, model_cfg, cfg, ids, labels,
                                               on_the_fly, steps, warmup)
    rate = steps / secs
    rows.append({"variant": "engine", "device": str(dev), "batch_size": big, "seq_len": int(used),
                 "precision": rt.precision, "compiled": rt.compiled,
                 "cuda_graphs": rt.cuda_graphs, "steps_per_s": rate, "tokens_per_s": rate * tokens_per_batch})
    df = pd.DataFrame(rows)
    df.insert(2, "threads", torch.get_num_threads())
    df["ratio_vs_naive"] = df["tokens_per_s"] / df.loc[0, "tokens_per_s"]
    flops = _flops_per_position(task, model_entry, model_cfg, train_cfg, ids, labels, dev)
    peaks = {}  # each row's peak in the precision its matmuls run in (fp32 naive, bf16 under autocast)
    for precision in df["precision"].unique():
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        peaks[precision] = matmul_peak(dev, dtype, peak_seconds) / 1e9
    df["model_gflop_per_s"] = df["tokens_per_s"] * flops / 1e9
    df["peak_gflop_per_s"] = df["precision"].map(peaks)
    df["frac_of_peak"] = df["model_gflop_per_s"] / df["peak_gflop_per_s"]
    return df


def _flops_per_position(task, entry, model_cfg, cfg: TrainConfig, ids, labels, device) -> float:
    """Forward + backward FLOPs per position of the model on a batch of the training data."""
    torch.manual_seed(0)
    model = entry.obj(model_cfg, len(task.vocab), task.seq_len).to(device)
    n = min(len(ids), cfg.batch_size)
    x = torch.from_numpy(to_width(ids[:n], task.seq_len, task.pad_id)).to(device)  # (n, seq_len)
    y = loss_targets(x, torch.from_numpy(to_width(labels[:n], task.seq_len, IGNORE)).to(device),
                     cfg.loss_on, task.pad_id)
    return train_flops_per_position(model, x, y)
