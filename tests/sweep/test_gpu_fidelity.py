"""`study=gpu-fidelity`, the runs that need a GPU, end to end at scale=smoke on the CPU: the
assign_add runs cross initialisations (`seed`) with streams of batches (`task.batch_seed`),
the counting runs search OAF against the authors' LAF, and the report shows each assign_add
run's routing step beside the released run's. Also what the settings it relies on mean: a
batch stream is the batches alone (same pools, same held-out pairs), and leaving it unset
keeps every earlier run's directory; and the GPU-time estimate's packing arithmetic."""
from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from study.cli import main
from study.run.build import build_task
from study.run.config import resolve
from study.sweep import gpu_time
from study.sweep.plan import parse

SMOKE = ["scale=smoke", "seed=0", "train.steps=6", "train.checkpoints=2", "jobs=1",
         "train.eval_examples=64"]
# the counting part's DAS budget cut to a smoke run's (das.* on the command line would reach
# the assign_add part too, which runs no analysis)
DAS_SMOKE = {"das.n_train": "64", "das.n_test": "32", "das.steps": "3", "das.batch_size": "32",
             "das.k": "1,2"}  # a smoke network's state is 16 wide


def _smoke_study(tmp_path):
    from study.sweep.studies import STUDY_DIR
    text = (STUDY_DIR / "gpu-fidelity.toml").read_text()
    for key, value in DAS_SMOKE.items():
        text, n = re.subn(rf'^"{re.escape(key)}" = "[^"]*"$', f'"{key}" = "{value}"', text,
                          flags=re.M)
        assert n == 1, key
    text += '"das.min_changed" = "2"\n'
    path = tmp_path / "gpu-fidelity.toml"
    path.write_text(text)
    return path


def test_the_study_crosses_initialisations_with_batch_streams_and_searches_both_lafs():
    plan, options = parse(["study=gpu-fidelity"])
    add = [r.cfg for r in plan.runs if r.cfg.task == "assign_add"]
    assert len(add) >= 16 and {(c.seed, c.task_config.batch_seed) for c in add} == {
        (s, b) for s in range(4) for b in range(4)}
    assert all(c.scale == "paper" and c.train.steps == 8000 and c.train.eval_every == 100
               for c in add)
    das = [r.cfg for r in plan.runs if r.cfg.task == "counting"]
    assert {(c.model, c.seed) for c in das} == {(m, s) for m in ("gru", "lstm") for s in range(5)}
    d = das[0].analysis_configs["das"]
    assert (d.alignments, d.steps, d.n_train, d.lr, d.batch_size, d.standardize, d.k) == (
        ("oaf", "laf_sd", "random"), 20_000, 10_000, 1e-3, 128, False, (1, 2, 4, 16, 32))
    assert d.controls and d.control_k == "all"
    assert options.jobs_per_gpu == "auto"


def test_the_counting_part_is_the_grant_study_run_for_run():
    """Grant et al.'s question on the GPU is `study=counting-grant` itself: the same runs, so
    either sweep finds the other's finished runs and their DAS snapshots."""
    plan, _ = parse(["study=gpu-fidelity"])
    grant, _ = parse(["study=counting-grant"])
    gpu = {r.path.name: r.cfg for r in plan.runs if r.cfg.task == "counting"}
    cpu = {r.path.name: r.cfg for r in grant.runs}
    assert gpu.keys() == cpu.keys() and len(gpu) == 10
    for name, cfg in gpu.items():
        assert cfg.train == cpu[name].train
        assert cfg.analysis_configs == cpu[name].analysis_configs


def test_a_batch_stream_changes_the_batches_only_and_unset_keeps_the_run_directories():
    base = {"task": "assign_add", "model": "attn2", "scale": "smoke"}
    plain, same, other = (resolve({**base, **extra}) for extra in (
        {}, {"task.batch_seed": "42"}, {"task.batch_seed": "7"}))
    t_plain, t_same, t_other = map(build_task, (plain, same, other))
    assert np.array_equal(t_plain.train_batch(3, 8).ids, t_same.train_batch(3, 8).ids)
    assert not np.array_equal(t_plain.train_batch(3, 8).ids, t_other.train_batch(3, 8).ids)
    for split in ("var1_seen_allowed", "test"):  # the pools and held-out pairs are the same
        assert np.array_equal(t_plain.split(split).ids, t_other.split(split).ids)
    assert np.array_equal(t_plain.held, t_other.held)
    assert len({plain.hash8(), same.hash8(), other.hash8()}) == 3
    # unset, the setting is no part of the identity: earlier runs keep their hash
    assert "batch_seed" not in plain.identity()["task_config"]
    assert "batch_seed" in other.identity()["task_config"]


def test_packed_runs_wait_for_room_and_the_gpu_bounds_the_wave():
    small = [gpu_time.RunTime(f"r{i}", 100.0, 1.0, 4) for i in range(8)]
    assert gpu_time.packed_seconds(small) == 200.0  # two waves of four
    big = gpu_time.RunTime("gpt12", 50.0, 40.0, 1)
    assert gpu_time.packed_seconds([big, *small[:4]]) == 150.0  # alone, then the four
    busy = [gpu_time.RunTime(f"b{i}", 10.0, 9.0, 4) for i in range(4)]
    assert gpu_time.packed_seconds(busy) == 36.0  # the GPU itself is the limit


def test_das_updates_count_every_batch_of_the_loop_at_every_k_and_control():
    plan, _ = parse(["study=gpu-fidelity"])
    cfg = next(r.cfg for r in plan.runs if r.cfg.task == "counting")
    # on a GPU OAF and the authors' LAF at each k train as one batch: one forward per update,
    # at each of the five k of the search and of its two controls
    assert gpu_time.das_batches(cfg.analysis_configs["das"]) == [("oaf", "laf_sd")]
    assert gpu_time.das_updates(cfg) == 20_000 * 5 * 3
    keys = {"task": "counting", "model": "gru", "scale": "small", "analyses": "das",
            "das.alignments": "oaf,laf,random", "das.k": "1,2", "das.steps": "10",
            "das.variables": "up_down:count", "das.controls": "true", "das.restarts": "2"}
    more = resolve(keys)
    assert gpu_time.das_batches(more.analysis_configs["das"]) == [("oaf", "oaf", "laf", "laf")]
    assert gpu_time.das_updates(more) == 10 * (2 + 2 * 2)  # two k; two controls, each
    # climbing both k of the ladder
    fewer = resolve({**keys, "das.control_k": "1"})
    assert gpu_time.das_updates(fewer) == 10 * (2 + 2 * 1)  # the controls stop at k = 1
    apart = resolve({**keys, "das.batch_kinds": "off"})  # a batch per kind
    assert gpu_time.das_updates(apart) == 2 * 10 * (2 + 2 * 2)


def test_a_fused_recurrent_kernel_counts_as_one_operation_each_way_as_on_cuda():
    """cuDNN runs torch's GRU as one operation forward and one backward, two kernels a step
    each way inside it (the recurrent GEMM, the fused gates) and a few per layer; the CPU
    runs it as a loop of small ones per step, counted as the bound on those kernels. The
    counted step computes what the plain one does."""
    torch.manual_seed(0)
    gru, x = torch.nn.GRU(4, 8, batch_first=True), torch.randn(3, 20, 4)  # 20 steps

    def step():
        gru.zero_grad()
        gru(x)[0].square().sum().backward()

    step()
    plain = [p.grad.clone() for p in gru.parameters()]
    cost = gpu_time._counted(step)
    for p, g in zip(gru.parameters(), plain):
        torch.testing.assert_close(p.grad, g)
    assert cost.ops <= 12  # a handful issued
    assert cost.kernels == (2 * 20 + 1) + (2 * 20 + 3)  # cuDNN's, forward and backward
    assert cost.bound >= 20 * 10 > cost.kernels  # ~30 a step inside as the CPU runs it
    ops = gpu_time._Ops()
    with ops:  # without the fused kernel's rule: every small operation issued
        step()
    assert ops.count >= cost.bound and ops.kernels == ops.bound == 0


def test_cudnn_kernels_follow_the_steps_layers_and_directions_of_a_call(monkeypatch):
    """Packed calls run `len(batch_sizes)` steps, padded ones the time axis (batch_first or
    not); each layer and direction runs its own."""
    from torch.nn.utils.rnn import pack_padded_sequence
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 8, num_layers=2, bidirectional=True)
    x = torch.randn(7, 3, 4)  # (time, batch, features)
    seen = []
    real = gpu_time.cudnn_kernels
    monkeypatch.setattr(gpu_time, "cudnn_kernels", lambda args: seen.append(real(args)) or seen[-1])
    gpu_time._counted(lambda: lstm(x)[0].sum().backward())
    packed = pack_padded_sequence(x, torch.tensor([5, 3, 2]))
    gpu_time._counted(lambda: lstm(packed)[0].data.sum().backward())
    assert seen == [(4 * (2 * 7 + 1), 4 * (2 * 7 + 3)), (4 * (2 * 5 + 1), 4 * (2 * 5 + 3))]


def test_the_estimate_prints_cudnns_count_and_the_upper_bound(capsys):
    """`python -m study.sweep.gpu_time`: the estimate, and beside it the bound where a run
    has recurrent calls; a wrong setting is one line naming the allowed values."""
    args = ["task=counting", "model=gru", "scale=smoke", "seed=0", "analyses=das",
            "das.steps=10", "das.variables=up_down:count", "das.controls=false"]
    assert gpu_time.main(args) == 0
    out = capsys.readouterr().out
    assert "as cuDNN runs them" in out and "(kernels=cpu, an upper bound)" in out
    cudnn = float(re.search(r"in all: ([\d.]+) s", out).group(1))
    bound = float(re.search(r"upper bound\): ([\d.]+) s", out).group(1))
    assert bound >= cudnn
    assert gpu_time.main(["kernels=gpu", *args]) == 2
    assert "kernels='gpu': choose from cudnn, cpu" in capsys.readouterr().err


def test_a_recurrent_das_update_is_counted_on_the_path_it_runs():
    """The DAS update at a recurrent state runs the fused kernel (`study/models/nets/rnn.py`,
    gathered); a counter that hooked every module (torch's `FlopCounterMode`) would send it
    down the step loop, and count that instead."""
    cfg = resolve({"task": "counting", "model": "gru", "scale": "smoke", "analyses": "das",
                   "das.alignments": "oaf,laf_sd", "das.variables": "up_down:count"})
    task = build_task(cfg)
    one, two = (gpu_time.das_update(cfg, task, kinds) for kinds in (("oaf",), ("oaf", "laf_sd")))
    assert one.bound > one.ops > 0  # most of the CPU's work inside the two fused calls
    assert 0 < one.kernels < one.bound  # which cuDNN runs as fewer, fused kernels
    assert two.flops > 1.9 * one.flops  # two members' rows in one forward ...
    assert two.ops < 1.5 * one.ops  # ... issued as about one update's operations


@pytest.mark.slow  # the calibration trains a paper-scale attn2 step on the CPU: minutes here
def test_the_gpu_time_of_each_part_is_estimated():
    parts = gpu_time.estimate(["study=gpu-fidelity"])
    assert [len(times) for _, times, _ in parts] == [16, 10]
    assert all(wall > 0 for *_, wall in parts)
    add = parts[0]
    assert all(t.per_gpu == 8 for t in add[1])  # small networks, packed 8 to the GPU
    assert add[2] <= gpu_time.JOB_S  # the routing part fits one job by the estimate


@pytest.mark.slow  # the study's sweep end to end
def test_the_study_runs_end_to_end_at_smoke_scale_and_reports_the_routing_steps(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["sweep", f"study={_smoke_study(tmp_path)}", *SMOKE]) == 0
    lines = printed.getvalue().strip().splitlines()
    runs = [tmp_path / line for line in lines[:-1]]
    assert len(runs) == 4 + 2 and lines[-1] == "report: runs/study-gpu-fidelity/index.html"
    streams = set()
    for rd in runs:
        cfg = json.loads((rd / "config.json").read_text())
        assert json.loads((rd / "status.json").read_text())["status"] == "done"
        if cfg["task"] == "assign_add":
            streams.add(cfg["task_config"]["batch_seed"])
        else:
            das = pd.read_parquet(rd / "analyses" / "das" / "das.parquet")
            assert set(das["alignment"]) >= {"oaf", "laf_sd"} and set(das["k"]) == {1, 2}
    assert streams == {0, 1, 2, 3}
    page = (tmp_path / lines[-1].removeprefix("report: ")).read_text()
    assert "When each run crosses, beside the published run" in page
    # the released run's routing step (every transition pool >= 0.95) and each smoke run's
    assert "5,401" in page
    assert len(re.findall(r"not by \d+", page)) >= 4
