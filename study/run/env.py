"""What a run was made with: versions, device, git revision (written to env.json)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "numpy", "pyvene", "transformers", "pandas", "scikit-learn", "altair")


def git_sha() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def describe_device() -> dict:
    import torch  # the caller is about to train, so torch is needed anyway

    if torch.cuda.is_available():
        return {"device": "cuda", "name": torch.cuda.get_device_name(0),
                "count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    # capability: the SIMD level torch's CPU kernels were dispatched to (AVX512, AVX2, DEFAULT;
    # ATEN_CPU_CAPABILITY lowers it), which decides how their sums round
    return {"device": "cpu", "threads": torch.get_num_threads(),
            "name": cpu_model() or platform.processor() or platform.machine(),
            "capability": torch.backends.cpu.get_cpu_capability()}


def cpu_model() -> str | None:
    """The CPU's model name (Linux: /proc/cpuinfo), which `platform` does not give."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


# where a run was launched from: the SLURM job (and how often it was requeued), the GPU assigned
LAUNCH_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
               "SLURMD_NODENAME", "SLURM_CPUS_PER_TASK", "CUDA_VISIBLE_DEVICES")


def environment() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": sys.version.split()[0], "platform": platform.platform(), "packages": versions,
            "git_sha": git_sha(), "device": describe_device(), "argv": sys.argv,
            "launch": {k: os.environ[k] for k in LAUNCH_VARS if k in os.environ}}
