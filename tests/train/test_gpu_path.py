"""The GPU code path, run on the CPU at smoke scale so that no part of it goes untested on a
machine without a GPU: bf16 autocast, `torch.compile` of forward + loss, fused AdamW and the
device-resident batches, forced on with `train.precision=bf16 train.compile=on
runtime.fused=on`. And the one-line causes `runtime.device=auto` stops with when a GPU is present
but unusable, and the torch build set-up picks for a driver."""
from __future__ import annotations

import time

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from study.run.config import train_config
from study.core import torch_backend
from study.core.registry import get
from study.core.rundir import RunDir
from study.train import checkpoint as ckpt
from study.train.gpu import explain
from study.train.loop import train
from study.train.runtime import resolve_device, resolve_runtime

TASK, MODEL = get("task", "counting"), get("model", "rope2")
GPU_PATH = {"device": "cpu", "precision": "bf16", "compile": "on", "fused": "on"}
PLAIN = {"device": "cpu", "precision": "fp32", "compile": "off", "fused": "off"}


def _train(path, settings):
    cfg = train_config(TASK, "smoke", {**settings, "steps": 30, "lr": 3e-3, "log_every": 5,
                                       "checkpoints": 2, "resume_minutes": 0})
    model_cfg = MODEL.make_config("smoke", {"n_layers": "1"})  # one layer: half the kernels to build
    summary = train(RunDir(path), TASK.obj(TASK.make_config("smoke")), MODEL, model_cfg, cfg, 0)
    losses = pd.read_parquet(path / "metrics.parquet").query("split == 'train' and metric == 'loss'")
    return summary, losses["value"].tolist()


@pytest.mark.slow  # bf16, torch.compile and fused AdamW on the CPU: a minute of compiling; gpu-check runs it on a GPU node
def test_the_gpu_code_path_trains_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # compiled kernels stay here
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    t0 = time.perf_counter()
    try:
        gpu, gpu_losses = _train(tmp_path / "gpu", GPU_PATH)
        frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        breaks = dict(torch._dynamo.utils.counters["graph_break"])
    finally:
        torch._dynamo.reset()
    took = time.perf_counter() - t0
    assert (gpu["precision"], gpu["compiled"], gpu["fused_adamw"]) == ("bf16", True, True)
    # forward + loss compiled once, whole: no graph break, no recompilation (on a GPU either
    # would cost most of the speed the compilation buys)
    assert frames == 1 and not breaks
    state = ckpt.read_state(ckpt.latest(tmp_path / "gpu"))
    assert state["optimizer"]["param_groups"][0]["fused"] is True  # the fused AdamW kernel stepped
    assert gpu["steps_done"] == 30 and all(map(torch.isfinite, torch.tensor(gpu_losses)))
    assert sum(gpu_losses[-2:]) / 2 < gpu_losses[0] - 0.3  # it learns

    plain, plain_losses = _train(tmp_path / "plain", PLAIN)
    assert (plain["precision"], plain["compiled"], plain["fused_adamw"]) == ("fp32", False, False)
    a = load_file(ckpt.latest(tmp_path / "gpu") / ckpt.WEIGHTS)
    b = load_file(ckpt.latest(tmp_path / "plain") / ckpt.WEIGHTS)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # bf16 and compiled kernels change the weights
    assert abs(gpu_losses[-1] - plain_losses[-1]) < 0.5  # ... not what is learned
    print(f"GPU code path on the CPU: {took:.1f} s with compilation")


def test_a_compiler_that_fails_leaves_one_line_and_eager_training_identical(tmp_path, monkeypatch,
                                                                             capsys):
    def broken(fn, **_kwargs):
        def call(*_a, **_k):
            raise RuntimeError("InductorError: no working C++ compiler found\nmore detail")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    failed, failed_losses = _train(tmp_path / "failed", {**PLAIN, "compile": "on"})
    err = capsys.readouterr().err
    notices = [ln for ln in err.splitlines() if ln.startswith("train.compile:")]
    assert len(notices) == 1 and "no working C++ compiler" in notices[0], err
    assert "Traceback" not in err and failed["compiled"] is False
    plain, plain_losses = _train(tmp_path / "plain", PLAIN)
    assert failed_losses == plain_losses and failed["steps_done"] == plain["steps_done"] == 30


def test_runtime_resolution_on_this_machine():
    from study.train.config import TrainConfig
    rt = resolve_runtime(TrainConfig(**GPU_PATH))
    assert (rt.precision, rt.compiled, rt.fused) == ("bf16", True, True)
    if not torch.cuda.is_available():
        auto = resolve_runtime(TrainConfig())
        assert (auto.device.type, auto.precision, auto.compiled, auto.fused) == ("cpu", "fp32", False, False)
        assert resolve_device("auto").type == "cpu"


def test_an_unusable_gpu_is_named_with_its_cause():
    cpu_build = explain("535.104.05", "2.13.0+cpu", None)
    assert "torch 2.13.0+cpu is a CPU build" in cpu_build and "driver 535.104.05" in cpu_build
    assert "picks cu121" in cpu_build and "runtime.device=cpu" in cpu_build
    old = explain("535.104.05", "2.13.0+cu130", "13.0")
    assert "needs NVIDIA driver >= 580.65.6" in old and "TORCH_BACKEND=cu121" in old
    other = explain("580.82.07", "2.13.0+cu130", "13.0", "CUDA unknown error - this may be due to an\n"
                    "incorrectly set up environment")
    assert "CUDA unknown error" in other and "\n" not in other


def test_the_torch_build_follows_the_driver():
    assert torch_backend.best_build(None) == "cpu"
    assert torch_backend.best_build("470.256.02") == "cpu"  # older than every CUDA 11.8+ build
    assert torch_backend.best_build("525.147.05") == "cu118"
    assert torch_backend.best_build("535.104.05") == "cu121"
    assert torch_backend.best_build("550.54.14") == "cu124"
    assert torch_backend.best_build("565.57.01") == "cu126"
    assert torch_backend.best_build("570.86.10") == "cu128"
    assert torch_backend.best_build("580.95.05") == "cu130"
    assert torch_backend.choose({"TORCH_BACKEND": "cu126"}, driver="535.104.05") == "cu126"
    assert torch_backend.choose({}, driver="535.104.05") == "cu121"
    with pytest.raises(ValueError, match="TORCH_BACKEND=cu999"):
        torch_backend.choose({"TORCH_BACKEND": "cu999"})
