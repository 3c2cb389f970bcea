"""`python -m study doctor`: what this machine gives a run, before hundreds of them are sent.

Prints Python, torch and its build (CUDA version or CPU), the NVIDIA driver and the torch build
it supports, each GPU, whether bf16 autocast, `torch.compile` and fused AdamW work here (each
tried on a tiny tensor), the settings a run would use (`runtime.device=auto` and so on), what
`sweep jobs=auto` would start, and a tokens/s probe: the training engine run for
`seconds=10` on `task=... model=... scale=...` (by default the binding paper's model on a GPU,
the counting study's GRU at scale=small on a CPU). A GPU that is present but unusable is named
with its cause. Exit status 0 when everything a run needs works, 1 otherwise.

    python -m study doctor [task=NAME model=NAME scale=S seconds=10] [train.FIELD=V ...]
"""
from __future__ import annotations

import platform
import sys
import time

from study.core.coerce import coerce
from study.core.errors import UsageError
from study.core.settings import split_args

PROBE_GPU = {"task": "binding", "model": "gpt12", "scale": "paper"}
PROBE_CPU = {"task": "counting", "model": "gru", "scale": "small"}


def _line(label: str, text: str) -> None:
    print(f"{label:<16} {text}", flush=True)


def cmd_doctor(args):
    kv = split_args(args)
    seconds = coerce("seconds", kv.pop("seconds", "10"), float)
    if not 0 <= seconds <= 600:
        raise UsageError(f"seconds={seconds:g}: expected 0 (no probe) to 600")
    bad = [k for k in kv if k not in ("task", "model", "scale", "seed") and not k.startswith("train.")]
    if bad:
        raise UsageError(f"unknown key {bad[0]!r} for doctor; valid: task, model, scale, seed, "
                         f"seconds, train.<field>")
    import torch

    from study.train.runtime import resolve_device
    from study.core.torch_backend import best_build, driver_version
    from study.train.gpu import problem
    ok = True
    _line("python", f"{sys.version.split()[0]} ({platform.platform()})")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    cudnn = torch.backends.cudnn.version() if torch.version.cuda else None
    _line("torch", f"{torch.__version__} ({build}{f', cuDNN {cudnn}' if cudnn else ''})")
    driver = driver_version()
    _line("NVIDIA driver", f"{driver} (supports torch builds up to {best_build(driver)})" if driver
          else "none (no NVIDIA GPU on this machine)")
    why = problem()
    if why is not None:
        ok = False
        _line("GPU", f"UNUSABLE: {why}")
    elif torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            _line(f"GPU {i}", f"{p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability "
                              f"{p.major}.{p.minor}")
    from study.sweep.launch import cores
    _line("CPU", f"{cores()} cores usable, torch threads {torch.get_num_threads()}")
    device = torch.device("cpu") if why is not None else resolve_device()  # said above
    for label, check in (("bf16 autocast", _bf16), ("torch.compile", _compile),
                         ("fused AdamW", _fused)):
        works, text = check(device)
        _line(label, f"{'yes' if works else 'NO'}: {text}")
        ok &= works or label == "bf16 autocast"
    ok &= _settings(kv)
    if seconds:
        ok &= _probe(kv, seconds, device)
    print("doctor: " + ("everything a run needs works" if ok else "some checks failed (above)"))
    return 0 if ok else 1


def _timed(fn) -> tuple[bool, str]:
    t0 = time.perf_counter()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the doctor reports any failure as a line
        return False, f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    return True, f"{time.perf_counter() - t0:.1f} s"


def _bf16(device) -> tuple[bool, str]:
    import torch
    if device.type == "cuda":
        if not torch.cuda.is_bf16_supported():
            return False, "this GPU has no bf16; runs use fp32"
        return True, f"{torch.cuda.get_device_name(0)}; runs use bf16 autocast (train.precision=auto)"

    def matmul():
        x = torch.randn(64, 64, device="cpu")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert (x @ x).dtype == torch.bfloat16
    works, took = _timed(matmul)
    flags = _cpu_flags()
    native = "native bf16 instructions" if flags & {"avx512_bf16", "amx_bf16"} else "emulated (slow)"
    return works, f"on the CPU ({native}; {took}); runs here use fp32 unless train.precision=bf16"


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _compile(device) -> tuple[bool, str]:
    import torch

    def run():
        f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1, dynamic=False)
        x = torch.randn(8, 8, device=device)
        torch.testing.assert_close(f(x), torch.nn.functional.gelu(x) * 2 + 1)
    works, took = _timed(run)
    return works, f"a tiny function compiled and ran on {device.type} in {took}" if works else took


def _fused(device) -> tuple[bool, str]:
    import torch

    def run():
        p = torch.nn.Parameter(torch.randn(16, device=device))
        opt = torch.optim.AdamW([p], lr=1e-3, fused=True)
        p.sum().backward()
        opt.step()
    works, took = _timed(run)
    return works, f"one step on {device.type} ({took})" if works else took


def _probe_kv(kv: dict) -> dict:
    import torch
    base = PROBE_GPU if torch.cuda.is_available() else PROBE_CPU
    return {**base, **kv}


def _settings(kv: dict) -> bool:
    """The runtime a run with these settings would get, and what `jobs=auto` starts."""
    from study.run.config import resolve
    from study.sweep.launch import slots
    try:
        cfg = resolve(_probe_kv(kv))
        from study.train.runtime import resolve_runtime
        rt = resolve_runtime(cfg.train)
    except UsageError as e:
        _line("run settings", f"REFUSED: {e}")
        return False
    _line("run settings", f"device {rt.device_name}, {rt.precision}, "
                          f"compile {'on' if rt.compiled else 'off'}, CUDA graphs "
                          f"{'on' if rt.cuda_graphs else 'off'}, fused AdamW "
                          f"{'on' if rt.fused else 'off'} (runtime.device={cfg.train.device}, "
                          f"train.precision={cfg.train.precision}, train.compile="
                          f"{cfg.train.compile}, runtime.fused={cfg.train.fused})")
    s = slots("auto", "auto", 10**6)
    on = (f"up to {s.jobs // len(s.gpus)} per GPU ({','.join(s.gpus)}; jobs_per_gpu=auto "
          f"packs small networks, gpt12 alone)" if s.gpus else "one per core")
    _line("sweep jobs=auto", f"{s.jobs} runs at once, {on}, {s.threads} torch threads each")
    return True


def _probe(kv: dict, seconds: float, device) -> bool:
    """Train with the engine for `seconds` and print tokens/s."""
    import torch

    from study.run.build import build_task
    from study.run.config import resolve
    from study.run.estimate import measure
    cfg = resolve(_probe_kv(kv))
    m = measure(cfg, build_task(cfg), seconds)
    rt = m.runtime
    peak = (f", peak GPU memory {torch.cuda.max_memory_allocated(rt.device) / 2**30:.2f} GiB"
            if rt.device.type == "cuda" else "")
    _line("probe", f"{cfg.task} × {cfg.model} at scale={cfg.scale}, batch {cfg.train.batch_size}, "
                   f"{rt.precision}{', compiled' if rt.compiled else ''}"
                   f"{', CUDA graphs' if rt.cuda_graphs else ''} on {rt.device_name}: "
                   f"{m.steps} steps in {m.seconds:.1f} s, {m.steps_per_s:.1f} steps/s, "
                   f"{m.steps * m.tokens / m.seconds:,.0f} tokens/s "
                   f"(data, model and warm-up {m.setup:.1f} s{peak})")
    return True
