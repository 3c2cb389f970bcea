"""Runs packed on GPUs (`jobs_per_gpu`): how many each run allows, and the local launcher on
a fake list of GPUs, whose run processes are stand-ins that record the GPU they were given
(`CUDA_VISIBLE_DEVICES`) and when they ran, so that assignment, limits and the skipping of
finished runs are seen without training."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from study.core.errors import UsageError
from study.core.memory import GIB
from study.run.build import build_task
from study.run.config import resolve
from study.sweep import launch, packing
from study.sweep.plan import parse


def _cfg(task, model, scale="paper"):
    cfg = resolve({"task": task, "model": model, "scale": scale})
    return cfg, build_task(cfg)


def test_auto_packs_the_small_networks_and_gives_gpt12_a_gpu_to_itself():
    h100 = 80 * GIB
    for task, model in (("counting", "gru"), ("counting", "lstm"), ("assign_add", "attn2"),
                        ("counting", "rope2")):
        cfg, task_ = _cfg(task, model)
        assert packing.runs_per_gpu(cfg, task_, "auto", h100, cores_per_gpu=16) == packing.MAX_PER_GPU
        assert packing.runs_per_gpu(cfg, task_, "auto", h100, cores_per_gpu=3) == 3  # a core each
        # a small GPU holds as many as its memory allows, never fewer than one
        assert packing.runs_per_gpu(cfg, task_, "auto", 4 * GIB, cores_per_gpu=16) == 2
        assert packing.runs_per_gpu(cfg, task_, "auto", GIB // 2, cores_per_gpu=16) == 1
        assert packing.runs_per_gpu(cfg, task_, "5", h100, cores_per_gpu=1) == 5  # as told
    cfg, task_ = _cfg("binding", "gpt12")
    assert packing.runs_per_gpu(cfg, task_, "auto", h100, cores_per_gpu=16) == 1


def test_slurm_packs_consecutive_runs_of_the_same_number():
    assert packing.groups([2, 2, 2, 1, 2, 2, 3, 3, 3, 3]) == [
        [0, 1], [2], [3], [4, 5], [6, 7, 8], [9]]


def test_jobs_per_gpu_is_checked_when_the_command_line_is_parsed():
    base = ["task=counting", "model=gru", "scale=smoke"]
    for bad, match in ((["jobs_per_gpu=0"], "jobs_per_gpu='0': expected auto"),
                       (["jobs_per_gpu=lots"], "jobs_per_gpu='lots'"),
                       (["jobs_per_gpu=2", "gpus=none"], "jobs_per_gpu=2 given with gpus=none")):
        with pytest.raises(UsageError, match=match):
            parse(base + bad)
    plain, _ = parse(base)
    packed, options = parse(base + ["jobs_per_gpu=3"])
    assert options.jobs_per_gpu == "3"
    assert [r.path for r in packed.runs] == [r.path for r in plain.runs]  # no part of a run
    assert parse(base + ["launcher=slurm", "jobs_per_gpu=4"])[1].jobs_per_gpu == "4"


def test_slots_hold_the_gpus_times_the_runs_each_may_hold():
    s = launch.slots("", "auto", 100, visible=["4", "7"], per_gpu="3")
    assert (s.jobs, s.gpus, s.per_gpu) == (6, ("4", "7"), "3")
    assert launch.slots("", "auto", 4, visible=["4", "7"], per_gpu="3").jobs == 4  # the runs
    assert launch.slots("2", "auto", 100, visible=["4", "7"], per_gpu="3").jobs == 2  # as told


# a stand-in for `python -m study run`: records its GPU and when it ran, marks the run done
_FAKE_RUN = """
import json, os, sys, time
path = sys.argv[1]
start = time.time()
time.sleep(0.6)
with open(os.path.join(path, "trace.json"), "w") as f:
    json.dump({"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start,
               "end": time.time()}, f)
"""


@pytest.fixture
def fake_runs(monkeypatch):
    """The launcher's run processes replaced by `_FAKE_RUN`; a run counts as finished once
    its stand-in wrote its trace. Returns the commands started."""
    started = []
    real_popen = subprocess.Popen

    def popen(args, stdout=None, stderr=None, env=None):
        path = Path(stderr.name).parent
        started.append(path)
        return real_popen([sys.executable, "-c", _FAKE_RUN, str(path)], stdout=stdout,
                          stderr=stderr, env=env)

    monkeypatch.setattr(launch.subprocess, "Popen", popen)
    monkeypatch.setattr(launch.runstate, "complete",
                        lambda path, *a, **k: (Path(path) / "trace.json").exists())
    monkeypatch.setattr(launch, "POLL_S", 0.05)
    return started


def _sweep(tmp_path, per_gpu, visible=("0", "1"), models="gru,lstm", seeds="0,1,2,3"):
    plan, _ = parse(["task=counting", f"model={models}", "scale=smoke", f"seed={seeds}"])
    planned = [dataclasses.replace(r, cfg=dataclasses.replace(
        r.cfg, run_dir=str(tmp_path / r.path.name))) for r in plan.runs]
    slots_ = launch.slots("", "auto", len(planned), visible=list(visible), per_gpu=per_gpu)
    return planned, slots_, launch.run_local(planned, slots_)


def _traces(planned):
    return {p.cfg.model + str(p.cfg.seed): json.loads((p.path / "trace.json").read_text())
            for p in planned}


def _most_at_once(traces, gpu) -> int:
    spans = [(t["start"], t["end"]) for t in traces if t["gpu"] == gpu]
    return max(sum(s <= a < e for s, e in spans) for a, _ in spans)


def test_runs_are_spread_over_the_gpus_within_the_runs_per_gpu(tmp_path, fake_runs):
    planned, slots_, out = _sweep(tmp_path, per_gpu="2")
    assert slots_.jobs == 4 and len(out.done) == 8 and not out.failed
    traces = list(_traces(planned).values())
    assert {t["gpu"] for t in traces} == {"0", "1"}  # every run got one GPU of the list
    assert max(_most_at_once(traces, g) for g in ("0", "1")) == 2  # packed, never past 2
    assert sum(t["gpu"] == "0" for t in traces) == 4  # the least busy GPU first: evenly


def test_a_run_that_needs_a_gpu_to_itself_never_shares_it(tmp_path, fake_runs, monkeypatch):
    # the lstm runs stand for gpt12 (one per GPU), the GRUs for the small networks (three)
    monkeypatch.setattr(packing, "runs_per_gpu",
                        lambda cfg, *a, **k: 1 if cfg.model == "lstm" else 3)
    planned, slots_, out = _sweep(tmp_path, per_gpu="auto", visible=("5",))
    assert len(out.done) == 8
    traces = _traces(planned)
    alone = [traces[f"lstm{s}"] for s in range(4)]
    for t in alone:  # nothing else ran on the GPU while it did
        assert not [o for k, o in traces.items() if o is not t and o["start"] < t["end"]
                    and t["start"] < o["end"]]
    assert _most_at_once([traces[f"gru{s}"] for s in range(4)], "5") in (2, 3)


def test_finished_runs_are_skipped_and_the_rest_resumed_on_the_gpus(tmp_path, fake_runs):
    planned, _, _ = _sweep(tmp_path, per_gpu="2", models="gru", seeds="0,1")
    assert len(fake_runs) == 2
    fake_runs.clear()
    planned, _, out = _sweep(tmp_path, per_gpu="2")
    assert len(out.done) == 8
    assert sorted(p.name for p in fake_runs) == sorted(
        p.path.name for p in planned if not (p.cfg.model == "gru" and p.cfg.seed < 2))
