"""Why a GPU this machine has cannot be used, in one line: a CPU build of torch on a GPU machine,
a driver too old for torch's CUDA build, or the CUDA error torch met. `runtime.device=auto` stops
with this line instead of training on the CPU without a word; `doctor` prints it."""
from __future__ import annotations

import os
import warnings

from study.core.errors import UsageError
from study.core.torch_backend import best_build, driver_version, min_driver, version_tuple

_FIX = "or pass runtime.device=cpu to train on the CPU"


def hidden_on_purpose() -> bool:
    """CUDA_VISIBLE_DEVICES set to hide every GPU (`""` or `-1`): the CPU is wanted."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    return env is not None and env.strip() in ("", "-1")


def explain(driver: str | None, torch_version: str, torch_cuda: str | None, error: str = "") -> str:
    """The cause, from the facts: the driver's version, torch's version and CUDA build (None: a
    CPU build) and the message torch gave when it looked for a device."""
    shown = f"driver {driver}" if driver else "an NVIDIA driver"
    if torch_cuda is None:
        return (f"this machine has an NVIDIA GPU ({shown}) but torch {torch_version} is a CPU "
                f"build; install a CUDA build (`make setup` picks {best_build(driver)} for this "
                f"driver; TORCH_BACKEND=... chooses another) {_FIX}")
    need = min_driver(torch_cuda)
    if driver and need and version_tuple(driver) < need:
        needed = ".".join(map(str, need))
        return (f"torch {torch_version} is built for CUDA {torch_cuda}, which needs NVIDIA driver "
                f">= {needed}, but this machine's is {driver}; install a build the driver "
                f"supports (`make setup TORCH_BACKEND={best_build(driver)}`), update the driver, "
                f"{_FIX}")
    cause = " ".join(error.split())[:300] or "torch found no usable CUDA device"
    return f"torch {torch_version} (CUDA {torch_cuda}) cannot use the NVIDIA GPU ({shown}): {cause}; {_FIX}"


def problem() -> str | None:
    """Why the GPU this machine has is unusable; None when there is none, it works, or it was
    hidden on purpose."""
    if hidden_on_purpose():
        return None
    driver = driver_version()
    if driver is None and not os.path.exists("/dev/nvidiactl"):
        return None
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if available:
        return None
    error = "; ".join(str(w.message) for w in caught)
    return explain(driver, torch.__version__, torch.version.cuda, error)


def usable_gpu_count(setting: str | None = None) -> int:
    """GPUs torch can use; an unusable GPU raises a UsageError naming `setting` and the cause
    (None: count it as no GPU)."""
    why = problem()
    if why is not None:
        if setting:
            raise UsageError(f"{setting}: {why}")
        return 0
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
