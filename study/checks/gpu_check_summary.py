"""What `python -m study gpu-check` writes: the machine's description, `summary.md` (an item
per line, the bench tables, steps/s per run), the log and the run directories packed without
their weights (`study/checks/gpu_check.py` runs the items). A GPU job returns at most 8 files
of 16 MiB each: the log keeps each item's last `ITEM_LOG_BYTES`, and the archive stops short
of `ARCHIVE_BYTES`, the small files first (tables, configs, reports), anything over
`MEMBER_BYTES` left out and named in its `LEFT_OUT.txt`."""
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

from study.analyses.common.context import PARTIAL
from study.checks.gpu_check_items import ROOT, Item, Options, Result

SUMMARY, LOG, ARCHIVE = "summary.md", "gpu-check.log", "runs.tar.gz"
PACKED = ("demo", "grid", "paper", "bench")  # the work folders whose run directories are packed
ITEM_LOG_BYTES = 1 << 20  # the last MiB of each item's output in the log (8 items: < 16 MiB)
ARCHIVE_BYTES = 14 << 20  # the archive stops before this, under the 16 MiB a job returns
MEMBER_BYTES = 4 << 20  # a file larger than this is left out of the archive (and named)


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
            f.write(_tail(r.output, ITEM_LOG_BYTES))


def _tail(text: str, limit: int) -> str:
    """`text` ending in a newline, cut to its last `limit` bytes (about) at a line start."""
    data = text.encode("utf-8", errors="replace")
    if len(data) > limit:
        cut = data[-limit:]
        cut = cut[cut.find(b"\n") + 1:]
        text = (f"[... the first {len(data) - len(cut):,} bytes of this item's output are left "
                f"out; the work folder (work=DIR) keeps its whole log ...]\n"
                + cut.decode("utf-8", errors="replace"))
    return text if text.endswith("\n") or not text else text + "\n"


def _weights(info: tarfile.TarInfo) -> bool:
    """A trained network's weights or optimiser state: under `checkpoints/`, all but
    meta.json; and an analysis's work in progress (`analyses/<name>/partial/`: das's training
    snapshots, `study.analyses.common.context.PARTIAL`)."""
    parts = Path(info.name).parts
    if not info.isfile():
        return False
    snapshot = any(a == "analyses" and p == PARTIAL for a, p in zip(parts, parts[2:-1]))
    return snapshot or ("checkpoints" in parts[:-1] and parts[-1] != "meta.json")


def _pack(work: Path, archive: Path, limit: int = ARCHIVE_BYTES,
          member_limit: int = MEMBER_BYTES) -> str | None:
    """The run directories in one tar.gz without weights, under `limit` bytes: the small files
    first, a file over `member_limit` left out, and packing stopped before the limit; what
    was left out is named in the archive's `LEFT_OUT.txt`. None, or why it failed."""
    import gzip
    import io

    tmp = archive.with_name(f".{archive.name}.tmp")
    files = sorted((p for name in PACKED if (work / name).exists()
                    for p in (work / name).rglob("*") if p.is_file() and not p.is_symlink()),
                   key=lambda p: (p.stat().st_size, str(p)))
    left_out: list[str] = []
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as gz, \
                tarfile.open(fileobj=gz, mode="w") as tar:
            for path in files:
                arc = str(path.relative_to(work))
                info = tar.gettarinfo(str(path), arcname=arc)
                if _weights(info):
                    continue
                size = info.size
                # the compressed bytes so far, and this file at worst uncompressed
                if size > member_limit or raw.tell() + size + (1 << 20) > limit:
                    left_out.append(f"{arc} ({size:,} bytes)")
                    continue
                with open(path, "rb") as f:
                    tar.addfile(info, f)
                gz.flush()  # so that raw.tell() counts what was packed
            if left_out:
                note = ("Left out to keep the archive under "
                        f"{limit >> 20} MiB (work=DIR keeps them):\n" + "\n".join(left_out) + "\n")
                data = note.encode()
                info = tarfile.TarInfo("LEFT_OUT.txt")
                info.size, info.mtime = len(data), int(time.time())
                tar.addfile(info, io.BytesIO(data))
        tmp.replace(archive)
        return None
    except (OSError, tarfile.TarError) as e:
        tmp.unlink(missing_ok=True)
        return f"packing the run directories failed: {type(e).__name__}: {e}"
