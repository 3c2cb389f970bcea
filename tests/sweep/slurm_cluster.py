"""A real one-node SLURM cluster for the tests: Debian's `slurm-wlm` (slurmctld, slurmd and
munge), configured in a temporary folder, started as this user's child processes and ended by
their PIDs. Nothing outside the folder is read or written: the configuration, the munge key
and socket, the state, the spool and the logs all live there, and the ports are free ones.

`start(folder)` returns a `Cluster` or raises `Unavailable` with the reason (not Linux, not
root, slurm-wlm missing and not installable, a daemon that does not come up)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


class Unavailable(Exception):
    """Why no cluster could be started (the tests that need it are skipped with it)."""


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # SLURM_CONF for clients
    procs: list[subprocess.Popen] = field(default_factory=list)
    node: str = ""

    def run(self, *cmd: str, check: bool = True) -> str:
        out = subprocess.run(list(cmd), capture_output=True, text=True, env={**os.environ, **self.env},
                             timeout=60)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
        return out.stdout

    def log(self, name: str) -> str:
        try:
            return (self.folder / name).read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Cancel every job, then end the daemons by their PIDs (slurmd first)."""
        with _suppress():
            self.run("scancel", "--full", "--quiet", *self._job_ids(), check=False)
        deadline = time.monotonic() + 20
        while self._job_ids() and time.monotonic() < deadline:
            time.sleep(0.5)
        for proc in reversed(self.procs):  # slurmd, slurmctld, munged
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)

    def _job_ids(self) -> list[str]:
        try:
            return self.run("squeue", "-h", "-o", "%A", check=False).split()
        except (OSError, subprocess.SubprocessError):
            return []


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], (OSError, subprocess.SubprocessError))


def _which(name: str) -> str | None:
    return shutil.which(name) or next((str(Path(d) / name) for d in SBIN if (Path(d) / name).exists()), None)


def ensure_installed() -> None:
    """Install Debian's slurm-wlm where it is missing and we may (root with apt-get)."""
    if all(_which(d) for d in DAEMONS):
        return
    if not sys.platform.startswith("linux"):
        raise Unavailable("SLURM tests need Linux")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("slurm-wlm is not installed and cannot be installed here (needs root and "
                          "apt-get): sudo apt-get install slurm-wlm")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    out = subprocess.run(["apt-get", "install", "-y", "-qq", "slurm-wlm"], capture_output=True,
                         text=True, env=env, timeout=900)
    if out.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=600)
        out = subprocess.run(["apt-get", "install", "-y", "-qq", "slurm-wlm"], capture_output=True,
                             text=True, env=env, timeout=900)
    if out.returncode != 0 or not all(_which(d) for d in DAEMONS):
        raise Unavailable(f"apt-get install slurm-wlm failed: {out.stderr.strip()[-300:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """\
ClusterName=studytest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge.sock,cred_expire=10
SlurmUser={user}
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
KillWait=10
InactiveLimit=0
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=60 State=UP
"""


def start(folder: Path, cpus: int = 2) -> Cluster:
    """munged, slurmctld and slurmd for one node, configured under `folder`."""
    ensure_installed()
    if os.geteuid() != 0:
        raise Unavailable("slurmd must run as root to start jobs; run the SLURM tests as root")
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    node = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(CONF.format(node=node, folder=folder, ctld_port=_free_port(),
                                slurmd_port=_free_port(), user="root",
                                cpus=max(1, min(cpus, os.cpu_count() or 1))))
    env = {"SLURM_CONF": str(conf)}
    cluster = Cluster(folder, env, node=node)
    full = {**os.environ, **env}
    try:
        cluster.procs.append(subprocess.Popen(
            [_which("munged"), "-F", "-f", f"--socket={folder}/munge.sock", f"--key-file={key}",
             f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
             f"--seed-file={folder}/munged.seed"],
            stdout=open(folder / "munged.out", "w"), stderr=subprocess.STDOUT))
        _wait(lambda: (folder / "munge.sock").exists(), 15, "munged did not create its socket",
              cluster, "munged.out")
        cluster.procs.append(subprocess.Popen([_which("slurmctld"), "-D", "-c", "-i"], env=full,
                                              stdout=open(folder / "slurmctld.out", "w"),
                                              stderr=subprocess.STDOUT))
        cluster.procs.append(subprocess.Popen([_which("slurmd"), "-D"], env=full,
                                              stdout=open(folder / "slurmd.out", "w"),
                                              stderr=subprocess.STDOUT))
        _wait(lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%t", check=False), 60,
              "the node did not become idle", cluster, "slurmctld.out")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait(ready, timeout: float, what: str, cluster: Cluster, logname: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (OSError, subprocess.SubprocessError, RuntimeError):
            pass
        if any(p.poll() is not None for p in cluster.procs):
            break
        time.sleep(0.5)
    raise Unavailable(f"{what}: {' '.join(cluster.log(logname).split())[-400:]}")
