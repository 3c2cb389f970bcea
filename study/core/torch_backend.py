"""Which torch build a machine's NVIDIA driver supports, from the standard library alone: set-up
(`make setup`) runs this file with the system's Python before any package is installed, and
`doctor` and `runtime.device=auto` use it to say why a GPU is unusable.

    python3 study/core/torch_backend.py                  # cpu, cu118, cu126, ...: the build to install
    .venv/bin/python study/core/torch_backend.py --installed cu126   # fails on a CPU build of torch

Each CUDA build of torch bundles its CUDA runtime and needs a driver at least as new as that
runtime's; the minimum driver of each toolkit is NVIDIA's table ("CUDA Toolkit and Corresponding
Driver Versions", Linux x86_64, the toolkit's GA release). The newest build whose minimum the
installed driver meets is chosen; `TORCH_BACKEND=cpu|cu118|cu121|...` overrides the choice.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

# (torch build, CUDA version, minimum Linux driver): newest first. PyTorch publishes each torch
# release for a few of them at https://download.pytorch.org/whl/<build>; pip then picks the
# newest torch that index holds.
BUILDS = (
    ("cu130", "13.0", (580, 65, 6)),
    ("cu129", "12.9", (575, 51, 3)),
    ("cu128", "12.8", (570, 26, 0)),
    ("cu126", "12.6", (560, 28, 3)),
    ("cu124", "12.4", (550, 54, 14)),
    ("cu121", "12.1", (530, 30, 2)),
    ("cu118", "11.8", (520, 61, 5)),
)
INDEX = "https://download.pytorch.org/whl/{build}"
_ENV = "TORCH_BACKEND"


def version_tuple(text: str) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); () when it holds no number."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def driver_version() -> str | None:
    """The loaded NVIDIA kernel driver's version (None: no driver)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        lines = out.stdout.strip().splitlines()
        if out.returncode == 0 and lines and version_tuple(lines[0]):
            return lines[0].strip()
    return None


def min_driver(cuda: str) -> tuple[int, ...] | None:
    """The minimum driver of a CUDA version ('12.6' or a build name 'cu126'); None if unknown."""
    for build, version, need in BUILDS:
        if cuda in (build, version) or version_tuple(cuda)[:2] == version_tuple(version)[:2]:
            return need
    return None


def best_build(driver: str | None) -> str:
    """The newest CUDA build the driver supports; 'cpu' without a driver or for one older than
    every build."""
    if not driver:
        return "cpu"
    have = version_tuple(driver)
    for build, _, need in BUILDS:
        if have >= need:
            return build
    return "cpu"


def choose(env: dict | None = None, driver: str | None = None) -> str:
    """TORCH_BACKEND if set (checked), else the best build for this machine's driver."""
    env = os.environ if env is None else env
    forced = env.get(_ENV, "").strip()
    if forced:
        if forced != "cpu" and forced not in {b for b, _, _ in BUILDS}:
            raise ValueError(f"{_ENV}={forced}: choose cpu or one of {', '.join(b for b, _, _ in BUILDS)}")
        return forced
    return best_build(driver_version() if driver is None else driver)


def check_installed(wanted: str) -> int:
    """`--installed BUILD`, run with the venv's Python after set-up: say which torch is installed
    and fail on a CPU build where a CUDA build was wanted (a GPU machine)."""
    import warnings
    # torch is checked before the project's packages (numpy among them) are installed: its
    # notice that numpy is missing says nothing about the build
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
    cuda = torch.version.cuda
    print(f"torch {torch.__version__} installed ({f'CUDA {cuda}' if cuda else 'CPU build'})")
    if wanted != "cpu" and cuda is None:
        print(f"error: torch {torch.__version__} is a CPU build but this machine has an NVIDIA "
              f"GPU (driver {driver_version()}) that the {wanted} build supports; remove the venv "
              f"and run make setup again (with WHEELHOUSE=, a wheelhouse made with "
              f"TORCH_BACKEND={wanted}), or pass TORCH_BACKEND=cpu to keep the CPU build",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--installed":
        return check_installed(argv[1])
    try:
        print(choose())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
