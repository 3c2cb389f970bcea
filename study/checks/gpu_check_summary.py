"""What `python -m study gpu-check` writes: the machine's description, `summary.md` (an item
per line, the bench tables, steps/s per run), the full log and the run directories packed
without their weights (`study/checks/gpu_check.py` runs the items)."""
from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from study.checks.gpu_check_items import ROOT, Item, Options, Result

SUMMARY, LOG, ARCHIVE = "summary.md", "gpu-check.log", "runs.tar.gz"
PACKED = ("demo", "grid", "paper", "bench")  # the work folders whose run directories are packed


def _shown(command) -> str:
    """A command as the summary shows it: the interpreter as `python`."""
    return shlex.join(["python" if c == sys.executable else c for c in command])


_MACHINE_PROBE = """
import json, platform, sys
info = {"python": sys.version.split()[0], "platform": platform.platform()}
try:
    from study.core.torch_backend import driver_version
    info["driver"] = driver_version()
except Exception:
    info["driver"] = None
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["cudnn"] = torch.backends.cudnn.version() if torch.version.cuda else None
    gpus = range(torch.cuda.device_count()) if torch.cuda.is_available() else ()
    info["gpus"] = [f"{p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability "
                    f"{p.major}.{p.minor}" for p in map(torch.cuda.get_device_properties, gpus)]
except Exception as e:
    info["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(info))
"""


def machine_info(env: dict) -> dict:
    """Python, torch and its CUDA build, the driver and the GPUs, as the items see them."""
    try:
        proc = subprocess.run([sys.executable, "-c", _MACHINE_PROBE], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        info = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        info = {"torch_error": f"the probe failed: {type(e).__name__}: {e}"}
    info["host"] = socket.gethostname()
    info["git"] = _git_sha()
    return info


def _git_sha() -> str:
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        return proc.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _machine_lines(m: dict) -> list[str]:
    build = (f"CUDA {m['cuda']}{', cuDNN ' + str(m['cudnn']) if m.get('cudnn') else ''}"
             if m.get("cuda") else "a CPU build")
    torch_line = (f"{m['torch']} ({build})" if "torch" in m
                  else f"not importable ({m.get('torch_error', 'unknown')})")
    gpus = "; ".join(m.get("gpus") or []) or "none visible"
    return [f"- GPU: {gpus}",
            f"- NVIDIA driver: {m.get('driver') or 'none'}",
            f"- torch: {torch_line}",
            f"- python: {m.get('python', '?')} ({m.get('platform', '?')}), "
            f"host {m.get('host', '?')}, git {m.get('git', '?')}"]


def write_summary(opts: Options, machine: dict, items: list[Item], results: list[Result],
                  work: Path, started: float, pack_error: str | None = None) -> None:
    """summary.md, rewritten as items end (the archive's line once it is written)."""
    done = {r.item.name: r for r in results}
    failed = [r for r in results if not r.ok]
    head = (f"all {len(items)} items passed" if len(done) == len(items) and not failed
            else f"{len(done) - len(failed)} of {len(items)} items passed"
            + (f", {len(items) - len(done)} not run" if len(done) < len(items) else ""))
    lines = [f"# gpu-check: {head}", "",
             f"- when: {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, "
             f"{_duration(time.time() - started)} in all",
             f"- settings: device={opts.device} quick={str(opts.quick).lower()} "
             f"scale={opts.scale}", *_machine_lines(machine), "",
             "| item | result | time | command |", "|---|---|---|---|"]
    for item in items:
        r = done.get(item.name)
        result = "not run" if r is None else ("pass" if r.ok else "**FAIL**")
        secs = "" if r is None else f"{r.seconds:.1f} s"
        cmds = "; ".join(f"`{_shown(c)}`" for c in item.commands).replace("|", "\\|")
        lines.append(f"| {item.name} | {result} | {secs} | {cmds} |")
    if failed or pack_error:
        lines += ["", "## Failures", ""]
        lines += [f"- {r.item.name}: {r.error}" for r in failed]
        lines += [f"- archive: {pack_error}"] if pack_error else []
    lines += _speed_lines(work, results)
    for name, title in (("train", "bench train"), ("das", "bench das")):
        table = work / "bench" / f"{name}.md"
        if table.exists():
            lines += ["", f"## {title}", "", table.read_text().strip()]
    lines += ["", f"Every item's full output: `{LOG}`."]
    archive = opts.out / ARCHIVE
    if archive.exists():
        lines.append(f"The run directories without weights: `{ARCHIVE}` "
                     f"({archive.stat().st_size / 2**20:.1f} MiB).")
    from study.core.rundir import atomic_write_bytes
    atomic_write_bytes(opts.out / SUMMARY, ("\n".join(lines) + "\n").encode())


def _speed_lines(work: Path, results: list[Result]) -> list[str]:
    """Steps/s of the paper runs and the demo's runs, doctor's probe, and the pools of
    assign_add at the end."""
    runs = sorted((work / "paper").glob("*/summary.json")) + \
        sorted((work / "demo" / "runs").glob("*/summary.json"))
    rows, pools = [], []
    for path in runs:
        try:
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        ended = ("time limit" if s.get("time_limited") else
                 "target reached" if s.get("stopped_early") else "all steps")
        rows.append(f"| {s.get('task')} × {s.get('model')} | {path.parent.name} | "
                    f"{s.get('steps_done')} of {s.get('steps')} ({ended}) | "
                    f"{_fmt(s.get('steps_per_s'), ',.1f')} | "
                    f"{_fmt(s.get('tokens_per_s'), ',.0f')} | "
                    f"{_fmt(s.get('train_time_s'), ',.1f')} | {s.get('device')}, "
                    f"{s.get('precision')}{', compiled' if s.get('compiled') else ''} |")
        if s.get("task") == "assign_add" and path.parent.parent.name == "paper":
            pools = [(split, acc.get("all")) for split, acc in (s.get("accuracy") or {}).items()
                     if split.startswith("var")]
    probe = [m.group(1) for r in results if r.item.name == "doctor"
             for m in [re.search(r"^probe +(.+)$", r.output, re.M)] if m]
    if not rows and not probe:
        return []
    lines = ["", "## Training speed", ""]
    lines += [f"doctor's probe: {probe[0]}", ""] if probe else []
    if rows:
        lines += ["| run | directory | steps | steps/s | tokens/s | training s | on |",
                  "|---|---|---|---|---|---|---|", *rows]
    if pools:
        lines += ["", "assign_add × attn2, final accuracy per pool:", "",
                  "| pool | accuracy |", "|---|---|",
                  *(f"| {p} | {_fmt(a, '.4f')} |" for p, a in pools)]
    return lines


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def _write_log(path: Path, machine: dict, results: list[Result]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("gpu-check log: every item's full output, in the order they ended\n")
        f.write("\n".join(_machine_lines(machine)) + "\n")
        for r in results:
            f.write(f"\n===== {r.item.name}: {'passed' if r.ok else 'FAILED: ' + r.error} "
                    f"({r.seconds:.1f} s) =====\n")
            f.write(r.output if r.output.endswith("\n") or not r.output else r.output + "\n")


def _weights(info: tarfile.TarInfo) -> bool:
    """A trained network's weights or optimiser state: under `checkpoints/`, all but meta.json."""
    parts = Path(info.name).parts
    return "checkpoints" in parts[:-1] and info.isfile() and parts[-1] != "meta.json"


def _pack(work: Path, archive: Path) -> str | None:
    """The run directories in one tar.gz without weights; None, or why it failed."""
    tmp = archive.with_name(f".{archive.name}.tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name in PACKED:
                if (work / name).exists():
                    tar.add(work / name, arcname=name,
                            filter=lambda info: None if _weights(info) else info)
        tmp.replace(archive)
        return None
    except (OSError, tarfile.TarError) as e:
        tmp.unlink(missing_ok=True)
        return f"packing the run directories failed: {type(e).__name__}: {e}"


