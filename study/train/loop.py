"""The training engine: one loop for every model family and every task.

`train(run, task, model_entry, model_cfg, train_cfg, seed)` builds the network, trains it
with AdamW on the task's training data, evaluates every split of `task.eval_splits` per
stratum at log-spaced checkpoints, and leaves in the run directory `metrics.parquet` (long
format: step, split, stratum, metric, value), `checkpoints/` and `summary.json`.

Speed [ours]: the whole (tokenised) training split lives on the device and batches are
indices into it, trimmed to the split's used length (`study/train/streams.py`). On CUDA: bf16 autocast, fused AdamW, `torch.compile` of forward + loss,
losses accumulated on the device and read back only at log intervals.

Resume: re-running on the same run directory continues from the newest checkpoint holding a
training state. Batch i is a pure function of (seed, i): the examples at stream positions
[i*B, (i+1)*B) of the concatenation of per-epoch permutations, epoch e's permutation drawn
from a generator seeded by (seed, e). The state holds the optimiser, the torch RNG (dropout)
and the pending loss sums, so on CPU a resumed run ends with bit-equal weights and equal
metrics. Ctrl-C is deferred to the end of the current step, which then writes a resume point.
"""
from __future__ import annotations

import dataclasses
import io
import json
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from study.core.network import takes_readout
from study.train import checkpoint as ckpt
from study.core.rundir import RunDir, atomic_write_bytes
from study.train.streams import make_stream, to_width, used_length
from study.train.config import TrainConfig
from study.core.labels import IGNORE

METRIC_COLUMNS = ("step", "split", "stratum", "metric", "value")
# settings that may change between an interrupted run and its resumption
RUNTIME_FIELDS = ("device", "precision", "compile", "resume_minutes", "keep_state")


# --- runtime, schedules --------------------------------------------------------------------

@dataclass(frozen=True)
class Runtime:
    device: torch.device
    amp_dtype: torch.dtype | None  # autocast dtype, None = fp32
    compiled: bool

    @property
    def precision(self) -> str:
        return "bf16" if self.amp_dtype == torch.bfloat16 else "fp32"

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)


def resolve_runtime(cfg: TrainConfig) -> Runtime:
    from study.core.errors import UsageError
    name = cfg.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"train.device={cfg.device!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"train.device={cfg.device!r} but no CUDA device is available; use train.device=cpu")
    cuda = device.type == "cuda"
    bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and cuda and torch.cuda.is_bf16_supported())
    if cuda:  # fp32 matmuls outside autocast may use TF32 [ours]
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    compiled = cfg.compile == "on" or (cfg.compile == "auto" and cuda)
    return Runtime(device, torch.bfloat16 if bf16 else None, compiled)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate of update `step` (0-based). Warm-up rises linearly from 0 and the linear
    decay reaches 0 at `steps`, as transformers' get_linear_schedule_with_warmup does."""
    if step < cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "linear":
        return cfg.lr * max(0, cfg.steps - step) / max(1, cfg.steps - cfg.warmup_steps)
    if cfg.schedule == "inverse_sqrt":
        return max(cfg.min_lr, cfg.lr * (max(1, cfg.warmup_steps) / max(1, step)) ** cfg.decay_rate)
    decayed = cfg.lr * cfg.decay_rate ** ((step - cfg.warmup_steps) // cfg.decay_steps)
    return max(cfg.min_lr, decayed)


def checkpoint_steps(steps: int, n: int) -> list[int]:
    """Step 0 (untrained) plus n steps roughly geometric in [1, steps], strictly increasing and
    ending at `steps`: dense early, where the phase transitions are, sparse late [ours]."""
    if steps <= n:
        return list(range(0, steps + 1))
    raw = np.rint(np.geomspace(1, steps, n)).astype(np.int64)
    out = [1]
    for v in raw[1:]:
        out.append(max(int(v), out[-1] + 1))
    out[-1] = steps
    for i in range(n - 2, -1, -1):  # the forward pass may have pushed the tail past `steps`
        out[i] = min(out[i], out[i + 1] - 1)
    return [0] + out


def auto_intervals(cfg: TrainConfig) -> tuple[int, int]:
    """(log_every, eval_every); eval_every 0 = evaluate at checkpoints only."""
    log_every = cfg.log_every or max(1, cfg.steps // 500)
    eval_every = cfg.eval_every or (max(1, cfg.steps // 200) if cfg.target_accuracy else 0)
    return log_every, eval_every


# --- the step ------------------------------------------------------------------------------

class Engine:
    """Model + optimiser + the compiled forward/loss: `step(ids, targets, lr)` is one update.
    The benchmark times this very object."""

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, runtime: Runtime):
        self.model, self.cfg, self.runtime = model, cfg, runtime
        self.params = [p for p in model.parameters() if p.requires_grad]
        extra = {"fused": True} if runtime.device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=tuple(cfg.betas),
                                           weight_decay=cfg.weight_decay, **extra)
        self._impl = {k: self.optimizer.defaults[k] for k in ("fused", "foreach")}
        # compiled graphs want static shapes, so only the eager path reads out scored positions
        self._readout = not runtime.compiled and takes_readout(model)
        self._loss = (torch.compile(self._forward_loss, dynamic=False) if runtime.compiled
                      else self._forward_loss)

    def load_optimizer(self, saved: dict) -> None:
        """Restore a saved optimiser state; the kernel choice (fused/foreach) stays this
        device's, since a state saved on CUDA may resume on the CPU and back."""
        self.optimizer.load_state_dict(saved)
        for group in self.optimizer.param_groups:
            group.update(self._impl)

    def _forward_loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._readout:  # eager: the output layer runs only where the loss looks
            mask = targets != IGNORE  # (B, L)
            with self.runtime.autocast():
                logits = self.model(ids, readout=mask)  # (n_scored, V)
            return F.cross_entropy(logits.float(), targets[mask])
        with self.runtime.autocast():
            logits = self.model(ids)  # (B, L, V)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE)

    def step(self, ids: torch.Tensor, targets: torch.Tensor, lr: float):
        """One update; returns (loss, grad norm or None) as device tensors (no sync)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss = self._loss(ids, targets)
        loss.backward()
        norm = (torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
                if self.cfg.grad_clip > 0 else None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), norm


class LossMeter:
    """Sums of loss and grad norm on the device since the last log row."""

    def __init__(self, device, saved: dict | None = None):
        saved = saved or {}
        self.loss = torch.tensor(saved.get("loss", 0.0), dtype=torch.float32, device=device)
        self.norm = torch.tensor(saved.get("norm", 0.0), dtype=torch.float32, device=device)
        self.count = int(saved.get("count", 0))

    def add(self, loss, norm) -> None:
        self.loss += loss
        if norm is not None:
            self.norm += norm.float()
        self.count += 1

    def state(self) -> dict:
        return {"loss": self.loss.item(), "norm": self.norm.item(), "count": self.count}

    def flush(self, step: int, lr: float, clip: bool) -> list[tuple]:
        n = max(1, self.count)
        rows = [(step, "train", "all", "loss", self.loss.item() / n),
                (step, "train", "all", "lr", lr)]
        if clip:
            rows.append((step, "train", "all", "grad_norm", self.norm.item() / n))
        self.loss.zero_()
        self.norm.zero_()
        self.count = 0
        return rows


# --- evaluation ----------------------------------------------------------------------------

class Evaluator:
    """Accuracy (every scored position right) and loss (mean CE over scored positions) on
    every eval split, overall ("all") and per stratum ("depth=3"); splits live on the device."""

    def __init__(self, task, cfg: TrainConfig, runtime: Runtime):
        self.runtime, self.splits = runtime, {}
        self.batch = max(256, cfg.batch_size)
        for name in task.eval_splits:
            ex = task.split(name)
            if cfg.eval_examples:
                ex = ex.take(slice(0, cfg.eval_examples))
            L = used_length(ex.ids, ex.labels, task.pad_id)
            groups = [("all", np.ones(len(ex), bool))]
            for key, values in ex.strata.items():
                for v in np.unique(values):
                    groups.append((f"{key}={_plain(v)}", values == v))
            self.splits[name] = (torch.from_numpy(to_width(ex.ids, L, task.pad_id)).to(runtime.device),
                                 torch.from_numpy(to_width(ex.labels, L, IGNORE)).to(runtime.device),
                                 groups)

    @torch.no_grad()
    def __call__(self, model, step: int) -> list[tuple]:
        rows = []
        with _eval_mode(model), self.runtime.autocast():
            for name, (ids, labels, groups) in self.splits.items():
                correct, loss, count = [], [], []
                for a in range(0, len(ids), self.batch):
                    x, y = ids[a:a + self.batch], labels[a:a + self.batch]  # (b, L)
                    logits = model(x).float()  # (b, L, V)
                    ce = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE, reduction="none")
                    ok = (logits.argmax(-1) == y) | (y == IGNORE)
                    correct.append(ok.all(-1))
                    loss.append(ce.sum(-1))
                    count.append((y != IGNORE).sum(-1))
                correct, loss, count = (torch.cat(t).cpu().numpy() for t in (correct, loss, count))
                scored = count > 0
                for stratum, mask in groups:
                    m = mask & scored
                    if m.any():
                        rows.append((step, name, stratum, "accuracy", float(correct[m].mean())))
                        rows.append((step, name, stratum, "loss", float(loss[m].sum() / count[m].sum())))
        return rows


class _eval_mode:
    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.was_training = self.model.training
        self.model.eval()

    def __exit__(self, *exc):
        self.model.train(self.was_training)


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def overall(rows: list[tuple], step: int) -> dict[str, float]:
    """{split: overall accuracy} of the eval rows at `step`."""
    return {r[1]: r[4] for r in rows if r[0] == step and r[2] == "all" and r[3] == "accuracy"
            and r[1] != "train"}


def reached(acc: dict[str, float], target: float | None) -> bool:
    """Early-stop test: every eval split except generalisation sets ("heldout*", "gen*")."""
    gate = {k: v for k, v in acc.items() if not k.startswith(("heldout", "gen"))}
    return target is not None and bool(gate) and all(v >= target for v in gate.values())


# --- metrics, summary ----------------------------------------------------------------------

def metrics_frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    return df.astype({"step": "int64", "split": str, "stratum": str, "metric": str, "value": "float64"})


def write_metrics(run: RunDir, rows: list[tuple]) -> None:
    buf = io.BytesIO()
    metrics_frame(rows).to_parquet(buf, index=False)
    atomic_write_bytes(run.metrics_path, buf.getvalue())


def read_metrics(run: RunDir, up_to: int) -> list[tuple]:
    try:
        df = pd.read_parquet(run.metrics_path)
        if tuple(df.columns) != METRIC_COLUMNS:
            raise ValueError(f"columns {list(df.columns)}")
    except Exception as e:
        raise ckpt.CheckpointError(f"cannot resume: {run.metrics_path} is unreadable ({e}); "
                                   f"re-run with force") from None
    df = df[df["step"] <= up_to]
    return [(int(s), sp, st, m, float(v)) for s, sp, st, m, v in df.itertuples(index=False, name=None)]


def summarize(rows: list[tuple], state: dict, info: dict) -> dict:
    step = state["step"]
    acc: dict = {}
    loss: dict = {}
    for s, split, stratum, metric, value in rows:
        if s == step and split != "train":
            (acc if metric == "accuracy" else loss).setdefault(split, {})[stratum] = value
    train_loss = [r[4] for r in rows if r[1] == "train" and r[3] == "loss"]
    secs = state["train_time_s"]
    return {**info, "steps_done": step, "stopped_early": state["stopped_early"],
            "time_limited": bool(state.get("time_limited", False)), "accuracy": acc, "loss": loss,
            "test_accuracy": acc.get("test", {}).get("all"),
            "train_loss": train_loss[-1] if train_loss else None,
            "wall_time_s": round(state["wall_time_s"], 3), "train_time_s": round(secs, 3),
            "steps_per_s": state["steps_timed"] / secs if secs > 0 else None,
            "tokens_per_s": state["tokens_timed"] / secs if secs > 0 else None}


# --- Ctrl-C --------------------------------------------------------------------------------

class _DeferInterrupt:
    """A first Ctrl-C only raises a flag, checked between steps (so the resume point written
    then is consistent); a second one interrupts at once."""

    def __enter__(self):
        self.flag, self._old = False, None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        if self.flag:
            raise KeyboardInterrupt
        self.flag = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


# --- the loop ------------------------------------------------------------------------------

def _jsonable(obj) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(obj), default=str))


def _check_same_run(old: dict, new: dict, where) -> None:
    for key in ("model", "model_config", "task", "task_config", "seed", "train_config"):
        a, b = old.get(key), new.get(key)
        if key == "train_config":
            a = {k: v for k, v in (a or {}).items() if k not in RUNTIME_FIELDS}
            b = {k: v for k, v in b.items() if k not in RUNTIME_FIELDS}
        if a != b:
            diff = ([k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
                    if isinstance(a, dict) and isinstance(b, dict) else [])
            raise ckpt.CheckpointError(
                f"{where} was trained with a different {key}"
                f"{' (' + ', '.join(diff) + ')' if diff else ''}; use a new run directory or force")


def train(run, task, model_entry, model_cfg, train_cfg: TrainConfig, seed: int, *,
          callback: Callable[[int], None] | None = None) -> dict:
    """Train (or resume) one run; returns the summary also written to summary.json.
    `callback(step)` runs after every completed step (raising KeyboardInterrupt from it
    behaves like Ctrl-C)."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    cfg, rt = train_cfg, resolve_runtime(train_cfg)
    vocab_size, seq_len = len(task.vocab), task.seq_len
    meta = {"model": model_entry.name, "model_config": _jsonable(model_cfg), "task": task.name,
            "task_config": _jsonable(task.config), "train_config": _jsonable(cfg), "seed": seed,
            "vocab_size": vocab_size, "seq_len": seq_len}

    ckpt.clean_temporaries(run)
    resume_dir = ckpt.latest(run)
    if resume_dir is None and ckpt.list_checkpoints(run):
        raise ckpt.CheckpointError(f"{ckpt.checkpoints_dir(run)} holds checkpoints but none with a "
                                   f"training state ({ckpt.STATE}); cannot resume: re-run with force")
    state = None
    if resume_dir is not None:
        _check_same_run(ckpt.read_meta(resume_dir), meta, resume_dir)
        state = ckpt.read_state(resume_dir)

    torch.manual_seed(seed)
    model = model_entry.obj(model_cfg, vocab_size, seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    info = {"task": task.name, "model": model_entry.name, "seed": seed, "steps": cfg.steps,
            "n_params": n_params, "device": _device_name(rt.device), "precision": rt.precision,
            "compiled": rt.compiled}
    if state is not None and state["finished"]:
        summary = summarize(read_metrics(run, state["step"]), state, info)
        run.write_json("summary.json", summary)
        return summary

    if state is not None:
        ckpt.load_weights(model, resume_dir)
    model.to(rt.device).train()
    engine = Engine(model, cfg, rt)
    if state is not None:
        engine.load_optimizer(state["optimizer"])
        torch.set_rng_state(state["rng_cpu"])
        if rt.device.type == "cuda" and len(state["rng_cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        rows = read_metrics(run, state["step"])
    else:
        rows = []
        state = {"step": 0, "train_time_s": 0.0, "wall_time_s": 0.0, "steps_timed": 0,
                 "tokens_timed": 0.0, "stopped_early": False, "finished": False, "meter": {}}
    start = state["step"]
    stream = make_stream(task, cfg, seed, rt.device)
    evaluator = Evaluator(task, cfg, rt)
    meter = LossMeter(rt.device, state["meter"])
    log_every, eval_every = auto_intervals(cfg)
    ckpt_at = set(checkpoint_steps(cfg.steps, cfg.checkpoints))
    clip = cfg.grad_clip > 0

    def save(step: int, resume: bool) -> None:
        state.update(step=step, meter=meter.state(), optimizer=engine.optimizer.state_dict(),
                     rng_cpu=torch.get_rng_state(), examples_seen=step * cfg.batch_size,
                     rng_cuda=torch.cuda.get_rng_state_all() if rt.device.type == "cuda" else [])
        write_metrics(run, rows)  # first: a resume drops rows newer than its checkpoint
        ckpt.save(run, step, model, {**meta, "finished": state["finished"],
                                     "stopped_early": state["stopped_early"]},
                  state, resume=resume, keep_state=cfg.keep_state)

    if resume_dir is None:
        rows += evaluator(model, 0)
        save(0, resume=False)
    wall0 = time.monotonic() - state["wall_time_s"]
    last_acc = overall(rows, max((r[0] for r in rows if r[1] != "train"), default=0))
    bar = _progress(cfg.steps, start, task.name, model_entry.name)
    done, saved, dirty = start, start, False
    t_mark, last_resume = time.monotonic(), time.monotonic()
    try:
        with _DeferInterrupt() as interrupt:
            for step in range(start + 1, cfg.steps + 1):
                dirty = True  # from here until the step's bookkeeping is written
                lr = lr_at(cfg, step - 1)
                meter.add(*engine.step(*stream.batch(step - 1), lr))
                done = step
                state["steps_timed"] += 1
                state["tokens_timed"] += stream.tokens_per_batch
                is_ckpt = step in ckpt_at
                out_of_time = bool(cfg.max_minutes) and step < cfg.steps and (
                    time.monotonic() - wall0 > 60 * cfg.max_minutes)
                if out_of_time:  # the time budget ends training like a target would
                    state["stopped_early"] = state["time_limited"] = is_ckpt = True
                is_eval = is_ckpt or (eval_every and step % eval_every == 0)
                if step % log_every == 0 or is_eval:
                    logged = meter.flush(step, lr, clip)
                    rows += logged
                    _sync(rt.device)
                    now = time.monotonic()
                    state["train_time_s"] += now - t_mark
                    t_mark = now
                    bar.update(step - bar.n)
                    bar.set_postfix(loss=f"{logged[0][4]:.4f}", acc=_fmt_acc(last_acc),
                                    tok_s=f"{state['tokens_timed'] / max(state['train_time_s'], 1e-9):.3g}")
                if is_eval:
                    rows += evaluator(model, step)
                    last_acc = overall(rows, step)
                    if reached(last_acc, cfg.target_accuracy):
                        state["stopped_early"] = step < cfg.steps
                        is_ckpt = True
                if is_ckpt or step == cfg.steps:
                    state["finished"] = state["stopped_early"] or step == cfg.steps
                    state["wall_time_s"] = time.monotonic() - wall0
                    save(step, resume=False)
                    saved, last_resume = step, time.monotonic()
                elif cfg.resume_minutes and time.monotonic() - last_resume > 60 * cfg.resume_minutes:
                    state["wall_time_s"] = time.monotonic() - wall0
                    save(step, resume=True)
                    saved, last_resume = step, time.monotonic()
                t_mark = time.monotonic() if (is_eval or saved == step) else t_mark
                dirty = False
                if callback is not None:
                    callback(step)
                if interrupt.flag:
                    raise KeyboardInterrupt
                if state["finished"]:
                    break
    except KeyboardInterrupt:
        if not dirty and done > saved:
            state["wall_time_s"] = time.monotonic() - wall0
            save(done, resume=True)
        raise
    finally:
        bar.close()
        stream.close()
    summary = summarize(rows, state, info)
    run.write_json("summary.json", summary)
    return summary


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _fmt_acc(acc: dict[str, float]) -> str:
    if not acc:
        return "-"
    key = "val" if "val" in acc else next(iter(acc))
    return f"{acc[key]:.3f}"


def _progress(total: int, initial: int, task: str, model: str):
    from tqdm.auto import tqdm
    # disable=None: silent when stderr is not a terminal (logs, CI)
    return tqdm(total=total, initial=initial, disable=None, desc=f"{task}/{model}",
                unit="step", dynamic_ncols=True, smoothing=0.05)
