"""The settings of how a sweep executes, apart from what its runs compute.

`launcher`, `jobs`, `gpus`, `jobs_per_gpu`, `wait`, `dry_run`, `long` and every `slurm.*` key say where and
how the runs are executed; they are taken out of the key=value pairs before the runs are resolved,
so they never enter a run's identity (its hash, its directory, the "same run?" check): the
same sweep on a laptop, a GPU machine or a cluster trains the same runs in the same folders.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from study.core.coerce import coerce
from study.core.errors import UsageError
from study.core.settings import fields_of, resolve_group, setting

SWEEP_KEYS = {
    "study": "a predefined study (demo, counting, ...) or the path of a .toml study file",
    "launcher": "local (processes on this machine) | slurm (one job array through submitit)",
    "jobs": "runs at once on this machine: auto (the GPUs times the runs each holds, else one "
            "per core) or N",
    "gpus": "GPUs this machine's runs may use: auto (all visible), none, or 0,1,...",
    "jobs_per_gpu": "runs sharing one GPU: auto (from each run's estimated memory and size: "
                    "small networks packed, gpt12 alone) or N; with launcher=slurm, runs per "
                    "array task (each task's slurm.gpus GPUs, or its slurm.cpus on a CPU job)",
    "wait": "launcher=slurm: wait for the jobs and print the report's path (false: return "
            "after submission)",
    "dry_run": "list the runs, their directories and status; run and submit nothing",
    "long": "ok: start a local sweep whose CPU runs are estimated to train for over an hour "
            "here (as run's long=ok)",
}


@dataclass(frozen=True)
class SlurmConfig:
    """`slurm.*`: the resources of each array task (one run) and of the report job."""
    partition: str = setting("", "partition (empty: the cluster's default)")
    account: str = setting("", "account to charge (empty: your default)")
    qos: str = setting("", "quality of service (empty: the default)")
    constraint: str = setting("", "node features required, e.g. a100 (empty: any node)")
    gpus: int = setting(0, "GPUs per run (0: a CPU job)")
    cpus: int = setting(2, "CPU cores per run (torch uses this many threads)")
    mem_gb: float = setting(0.0, "memory per run in GB (0: the partition's default)")
    time: int = setting(60, "time limit per job in minutes; a run that needs longer is "
                            "requeued at the limit and resumes")
    setup: str = setting("", "shell lines run before each job (module load ...; source "
                             "venv/bin/activate), separated by ';' or newlines")
    array_parallelism: int = setting(64, "at most this many array tasks at once (a task runs "
                                         "one run, or several packed: jobs_per_gpu)")
    signal_delay_s: int = setting(120, "SLURM signals a job this many seconds before its "
                                       "limit: the run writes a resume point and is requeued")
    max_requeues: int = setting(20, "time-limit requeues per run before it counts as failed")
    report_time: int = setting(60, "time limit of the report job in minutes")

    def __post_init__(self):
        for name in ("cpus", "time", "array_parallelism", "report_time"):
            if getattr(self, name) < 1:
                raise UsageError(f"slurm.{name}={getattr(self, name)}: must be at least 1")
        for name in ("gpus", "max_requeues"):
            if getattr(self, name) < 0:
                raise UsageError(f"slurm.{name}={getattr(self, name)}: must be 0 or more")
        if not (math.isfinite(self.mem_gb) and self.mem_gb >= 0):
            raise UsageError(f"slurm.mem_gb={self.mem_gb}: must be 0 (the default) or a number > 0")
        if not 0 < self.signal_delay_s < 60 * self.time:
            raise UsageError(f"slurm.signal_delay_s={self.signal_delay_s}: must be above 0 and "
                             f"below slurm.time ({self.time} min = {60 * self.time} s)")

    @property
    def setup_lines(self) -> list[str]:
        return [ln.strip() for part in self.setup.splitlines() for ln in part.split(";") if ln.strip()]


@dataclass(frozen=True)
class SweepOptions:
    launcher: Literal["local", "slurm"] = "local"
    jobs: str = ""  # "" = the default, "auto" or a whole number (checked by parse_jobs)
    gpus: str = "auto"  # "auto", "none" or "0,1,..." (checked against the machine by the launcher)
    jobs_per_gpu: str = "auto"  # "auto" or a whole number (study/sweep/packing.py)
    wait: bool = True
    dry_run: bool = False
    slurm: SlurmConfig = SlurmConfig()
    long: bool = False  # long=ok: no refusal of a local CPU sweep over an hour


def split_options(kv: dict[str, str], from_study: frozenset[str] = frozenset()
                  ) -> tuple[SweepOptions, dict[str, str]]:
    """(how the sweep executes, the key=value pairs of its runs). Every option is checked here,
    before anything runs. `from_study`: keys a study file set (its `slurm.*` defaults apply
    only when it is launched through SLURM)."""
    kv = dict(kv)
    launcher = kv.pop("launcher", "local")
    if launcher not in ("local", "slurm"):
        raise UsageError(f"launcher={launcher!r}: choose local or slurm")
    jobs = kv.pop("jobs", "")
    if jobs and jobs != "auto":
        try:
            n = int(jobs)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"jobs={jobs!r}: expected auto or a whole number >= 1")
    gpus = kv.pop("gpus", "auto").replace(" ", "")
    if gpus not in ("auto", "none", ""):
        try:
            ids = [int(g) for g in gpus.split(",")]
        except ValueError:
            ids = [-1]
        if any(g < 0 for g in ids) or len(set(ids)) != len(ids):
            raise UsageError(f"gpus={gpus!r}: expected auto, none or distinct GPU indices like 0,1,2")
    from study.sweep.packing import check as check_per_gpu
    per_gpu_given = "jobs_per_gpu" in kv
    per_gpu = check_per_gpu(kv.pop("jobs_per_gpu", "auto"))
    if per_gpu_given and per_gpu != "auto" and launcher == "local" and gpus == "none":
        raise UsageError(f"jobs_per_gpu={per_gpu} given with gpus=none; give GPUs (gpus=auto "
                         f"or gpus=0,1,...) or leave jobs_per_gpu out")
    wait = coerce("wait", kv.pop("wait"), bool) if "wait" in kv else True
    dry_run = coerce("dry_run", kv.pop("dry_run"), bool) if "dry_run" in kv else False
    long = kv.pop("long", "no")
    if long not in ("ok", "no"):
        raise UsageError(f"long={long!r}: use long=ok to start a sweep expected to train for "
                         f"over an hour on this CPU")
    slurm_keys = fields_of(kv, "slurm")
    for key in [k for k in kv if k.startswith("slurm.")]:
        del kv[key]
    slurm = resolve_group(SlurmConfig, "slurm", None, slurm_keys)
    if launcher != "slurm":
        given = [k for k in slurm_keys if f"slurm.{k}" not in from_study]
        if given:
            raise UsageError(f"slurm.{given[0]} given but launcher={launcher}; add launcher=slurm")
        if not wait:
            raise UsageError("wait=false needs launcher=slurm (a local sweep runs in this process)")
    elif jobs or gpus not in ("auto", ""):
        which = "jobs" if jobs else "gpus"
        raise UsageError(f"{which}= is for launcher=local; with launcher=slurm use "
                         f"slurm.array_parallelism and slurm.gpus")
    return SweepOptions(launcher, jobs, gpus or "none", per_gpu, wait, dry_run, slurm,
                        long == "ok"), kv
