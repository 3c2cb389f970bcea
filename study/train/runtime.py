"""Where and how training runs: the device, the autocast precision, whether forward + loss are
compiled and whether AdamW uses its fused kernel, resolved once from the `device`,
`precision`, `compile`, `fused` and `cuda_graphs` settings. `auto` means all of them on CUDA
and none on the CPU; each but CUDA graphs can be forced on the CPU too, which is how the tests
run the GPU code path on a machine without one."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from study.core.errors import UsageError
from study.train.config import TrainConfig


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    amp_dtype: torch.dtype | None  # autocast dtype, None = fp32
    compiled: bool
    fused: bool = False  # AdamW's fused kernel
    cuda_graphs: bool = False  # the compiled forward/backward replayed as CUDA graphs

    @property
    def precision(self) -> str:
        return "bf16" if self.amp_dtype == torch.bfloat16 else "fp32"

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)

    def sync(self) -> None:
        """Wait for queued device work, so that a clock read afterwards counts it."""
        sync(self.device)

    @property
    def device_name(self) -> str:
        """The device as the summary names it: "cpu", or "cuda:0 (NVIDIA H100 ...)"."""
        if self.device.type == "cuda":
            return f"{self.device} ({torch.cuda.get_device_name(self.device)})"
        return str(self.device)


def resolve_device(setting="auto", key: str = "runtime.device") -> torch.device:
    """The device to work on, chosen in this one place for training, analysing, comparing and
    the checks: `setting` as given (a name or a `torch.device`), or, for None and "auto", the
    GPU when CUDA is available, else the CPU. A one-line UsageError naming `key` for a device
    this machine lacks (also run at parse time, before a run directory is created)."""
    if isinstance(setting, torch.device):
        setting = str(setting)
    name = setting = setting or "auto"
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        else:  # a GPU that is there but unusable is said, not silently replaced by the CPU
            from study.train.gpu import problem
            why = problem()
            if why is not None:
                raise UsageError(f"{key}=auto: {why}")
            name = "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"{key}={setting!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"{key}={setting!r} but no CUDA device is available; use "
                             f"{key}=cpu (or auto)")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UsageError(f"{key}={setting!r} but this machine has {count} CUDA "
                             f"device{'s' if count != 1 else ''} (cuda:0..cuda:{count - 1})")
    return device


def resolve_runtime(cfg: TrainConfig) -> Runtime:
    device = resolve_device(cfg.device)
    cuda = device.type == "cuda"
    bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and cuda and torch.cuda.is_bf16_supported())
    if cuda:  # fp32 matmuls outside autocast may use TF32 [ours]
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    compiled = cfg.compile == "on" or (cfg.compile == "auto" and cuda)
    fused = cfg.fused == "on" or (cfg.fused == "auto" and cuda)
    graphs = compiled and cuda and cfg.cuda_graphs != "off"  # CUDA graphs exist on CUDA only
    return Runtime(device, torch.bfloat16 if bf16 else None, compiled, fused, graphs)


def sync(device: torch.device) -> None:
    """Wait for work queued on `device` (CUDA runs asynchronously), so that a clock read
    afterwards counts it; a no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
