"""`summary.json`: the headline of a finished run (final accuracy and loss per split and
stratum, how it ended, how long it took)."""
from __future__ import annotations

from study.core.rundir import RunDir
from study.train.config import TrainConfig
from study.train.feed import runs_free
from study.train.runtime import Runtime
from study.train.state import TrainState


def run_info(task, model_entry, seed: int, cfg: TrainConfig, model, rt: Runtime) -> dict:
    """The summary's description of the run itself."""
    return {"task": task.name, "model": model_entry.name, "seed": seed, "steps": cfg.steps,
            "n_params": sum(p.numel() for p in model.parameters()), "device": rt.device_name,
            "precision": rt.precision, "compiled": rt.compiled, "cuda_graphs": rt.cuda_graphs,
            "fused_adamw": rt.fused,
            "inputs": "free" if runs_free(cfg.feed_outputs, model) else "teacher"}


def summarize(rows: list[tuple], state: TrainState, info: dict) -> dict:
    """The summary of metric `rows` at the state's step."""
    step = state.step
    acc: dict = {}
    loss: dict = {}
    for s, split, stratum, metric, value in rows:
        if s == step and split != "train":
            (acc if metric == "accuracy" else loss).setdefault(split, {})[stratum] = value
    train_loss = [r[4] for r in rows if r[1] == "train" and r[3] == "loss"]
    secs = state.train_time_s
    return {**info, "steps_done": step, "stopped_early": state.stopped_early,
            "time_limited": state.time_limited, "accuracy": acc, "loss": loss,
            "test_accuracy": acc.get("test", {}).get("all"),
            "train_loss": train_loss[-1] if train_loss else None,
            "wall_time_s": round(state.wall_time_s, 3), "train_time_s": round(secs, 3),
            "steps_per_s": state.steps_timed / secs if secs > 0 else None,
            "tokens_per_s": state.tokens_timed / secs if secs > 0 else None}


def write_summary(run: RunDir, rows: list[tuple], state: TrainState, info: dict) -> dict:
    summary = summarize(rows, state, info)
    run.write_json("summary.json", summary)
    return summary
