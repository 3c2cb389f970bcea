"""Find, on a CPU-only machine, the tensors that would land on the CPU beside CUDA ones on a GPU.

On a GPU the network and the pairs live on `cuda`, and a tensor our code makes without a
device (`torch.eye(d)`, `torch.arange(n)`, `torch.tensor(list)`) lands on the CPU: the first
op that mixes the two fails ("Expected all tensors to be on the same device"). On a CPU-only
machine both are the CPU and nothing fails. `implicit_device_on_meta()` makes the fault
visible there: inside it, every tensor that *our* code (`study/analyses/`, `study/models/`, `study/`,
`study/reports/`, `study/tasks/`) creates with a factory and no `device=` lands on the `meta` device
instead, so it fails the moment it meets the CPU network and data ("Tensor on device meta is
not on the expected device cpu!", or "Cannot copy out of meta tensor" when it is read back),
exactly where a CPU tensor would meet a CUDA one.

What it leaves alone, and why:
- tensors made by libraries (torch's own Python code, pyvene, safetensors): pyvene builds
  index tensors on the CPU and reads them back (`.tolist()`), which is correct on a GPU (it
  runs there in its tutorials) but cannot run on `meta`. The frame that calls the factory
  decides: `torch.eye` called in `study/analyses/` is ours, the `torch.empty` inside pyvene's
  `RotateLayer` is pyvene's even when our code builds the layer;
- `torch.tensor(t)` / `torch.as_tensor(t)` of a tensor `t`: without a device these keep
  `t`'s device (torch's own default-device mode would move them to `meta`, a false alarm);
- a draw with `generator=`: it lives on the generator's device (a `torch.Generator()` is the
  CPU's; drawing there and moving the result is how a seed gives the same draw everywhere).
A deliberately host-side tensor of ours (a count read back with `int()`, a tensor saved to a
file, values computed on host arrays) says so with `device="cpu"` and passes.

What it cannot see: a tensor made on the CPU by `torch.from_numpy` or `.cpu()` and never
moved (no factory call to redirect). What it must not wrap: a network's construction (its
`__init__` uses torch's default device, by the convention of every `nn.Module`, and the
application then moves it with `.to(device)`); build networks before entering.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parents[2]
OURS = (str(ROOT / "study") + os.sep,)
_KEEP_DEVICE = {torch.tensor, torch.as_tensor, torch.asarray}  # of a tensor: its own device
_SKIP = (os.sep + "torch" + os.sep + "overrides.py", __file__)  # dispatch frames, not callers


def _constructors() -> set:
    """torch's factory functions, the ones that take the default device."""
    try:
        from torch.utils._device import _device_constructors
        return set(_device_constructors())
    except ImportError:  # a private helper; its list as of torch 2.x
        return {getattr(torch, n) for n in (
            "empty", "empty_strided", "zeros", "ones", "full", "eye", "arange", "range",
            "linspace", "logspace", "rand", "randn", "randint", "randperm", "tensor",
            "as_tensor", "asarray", "scalar_tensor", "tril_indices", "triu_indices")}


def _is_ours(filename: str, _cache: dict = {}) -> bool:
    if filename not in _cache:
        _cache[filename] = os.path.abspath(filename).startswith(OURS)
    return _cache[filename]


def _caller():
    """The frame that called the factory: the first outside this file and torch's dispatch."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.endswith(_SKIP):
        frame = frame.f_back
    return frame


class _OursToMeta(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.constructors = _constructors()
        self.seen: list[str] = []  # where each redirected tensor was made, for messages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if (func in self.constructors and kwargs.get("device") is None
                and kwargs.get("generator") is None
                and not (func in _KEEP_DEVICE and args and isinstance(args[0], torch.Tensor))):
            frame = _caller()
            if frame is not None and _is_ours(frame.f_code.co_filename):
                kwargs["device"] = "meta"
                self.seen.append(f"{os.path.relpath(frame.f_code.co_filename, ROOT)}:"
                                 f"{frame.f_lineno} torch.{func.__name__}")
        return func(*args, **kwargs)


@contextlib.contextmanager
def implicit_device_on_meta():
    """Inside: tensors our code makes without a device land on `meta` (module docstring).
    Yields the list of the places that made one (file:line torch.<factory>)."""
    mode = _OursToMeta()
    with mode:
        yield mode.seen
