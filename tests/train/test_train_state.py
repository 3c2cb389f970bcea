"""TrainState: what a checkpoint's state.pt holds, and that a state saved and restored lets
training continue exactly as if it had never stopped."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from study.core.rundir import RunDir
from study.train import checkpoint as ckpt
from study.train.config import TrainConfig
from study.train.engine import Engine
from study.train.meter import LossMeter
from study.train.runtime import Runtime
from study.train.state import TrainState

CPU = Runtime(torch.device("cpu"), None, False)
CFG = TrainConfig(steps=10, batch_size=4, lr=1e-2)
V, L = 7, 5


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.drop, self.out = nn.Embedding(V, 8), nn.Dropout(0.3), nn.Linear(8, V)

    def forward(self, ids):  # (B, L) -> (B, L, V)
        return self.out(self.drop(self.emb(ids)))


def _batch(i: int):
    g = torch.Generator().manual_seed(i)
    return torch.randint(V, (CFG.batch_size, L), generator=g), torch.randint(V, (CFG.batch_size, L), generator=g)


def _engine(seed: int = 0) -> tuple[Engine, LossMeter]:
    torch.manual_seed(seed)
    return Engine(Tiny(), CFG, CPU), LossMeter(CPU.device)


def test_train_state_round_trips_through_state_pt(tmp_path):
    run = RunDir(tmp_path)
    engine, meter = _engine()
    for i in range(3):
        meter.add(*engine.step(*_batch(i), lr=1e-2))
    rows = [(2, "train", "all", "loss", 1.5), (3, "train", "all", "loss", 1.25)]
    state = TrainState(step=2, train_time_s=1.5, wall_time_s=2.5, steps_timed=2, tokens_timed=40.0,
                       stopped_early=True, time_limited=True, finished=True, rows=rows,
                       accuracy={"val": 0.5})
    where = state.save(run, engine, meter, {"model": "tiny"}, resume=True, keep_state="last")
    assert where.name == "resume_00000002" and ckpt.latest(run) == where
    assert ckpt.read_meta(where)["finished"] and ckpt.read_meta(where)["stopped_early"]
    rng_after_save = torch.rand(3)

    # the file holds plain tensors and containers under the names resumes read
    saved = torch.load(where / ckpt.STATE, weights_only=True)
    assert {"step", "train_time_s", "wall_time_s", "steps_timed", "tokens_timed", "stopped_early",
            "time_limited", "finished", "examples_seen", "meter", "optimizer", "rng_cpu",
            "rng_cuda"} == set(saved)
    assert saved["examples_seen"] == 2 * CFG.batch_size and saved["meter"]["count"] == 3

    loaded = TrainState.load(where)
    for name in ("step", "train_time_s", "wall_time_s", "steps_timed", "tokens_timed",
                 "stopped_early", "time_limited", "finished", "examples_seen", "meter", "rng_cuda"):
        assert getattr(loaded, name) == getattr(state, name), name
    assert torch.equal(loaded.rng_cpu, state.rng_cpu)
    assert loaded.rows == [] and loaded.accuracy == {}  # not in state.pt

    # restored into a fresh engine holding the same weights, it continues identically
    other, _ = _engine(seed=1)
    other.model.load_state_dict(engine.model.state_dict())
    loaded.restore(run, other)
    assert loaded.rows == rows[:1]  # rows after the saved step are dropped
    assert torch.equal(torch.rand(3), rng_after_save)  # the RNG is back where it was saved
    torch.set_rng_state(state.rng_cpu)
    a = engine.step(*_batch(9), lr=1e-2)[0]
    torch.set_rng_state(state.rng_cpu)
    b = other.step(*_batch(9), lr=1e-2)[0]
    assert torch.equal(a, b)
    for p, q in zip(engine.model.parameters(), other.model.parameters()):
        assert torch.equal(p, q)
    resumed_meter = LossMeter(CPU.device, loaded.meter)
    assert resumed_meter.state() == meter.state()


def test_state_files_without_newer_entries_still_load():
    old = {"step": 5, "train_time_s": 1.0, "wall_time_s": 2.0, "steps_timed": 5, "tokens_timed": 9.0,
           "stopped_early": False, "finished": False, "meter": {}, "optimizer": {},
           "rng_cpu": torch.get_rng_state(), "rng_cuda": [], "examples_seen": 20, "unknown": 1}
    state = TrainState.from_dict(old)
    assert state.step == 5 and state.time_limited is False and not hasattr(state, "unknown")
    assert {k: v for k, v in state.to_dict().items() if k != "rng_cpu"} == \
        {**{k: v for k, v in old.items() if k not in ("rng_cpu", "unknown")}, "time_limited": False}


def test_restore_refuses_an_unreadable_metrics_table(tmp_path):
    run = RunDir(tmp_path)
    engine, meter = _engine()
    TrainState(rows=[(0, "val", "all", "accuracy", 0.25)]).save(run, engine, meter, {}, resume=False,
                                                               keep_state="last")
    (tmp_path / "metrics.parquet").write_bytes(b"junk")
    with pytest.raises(ckpt.CheckpointError, match="metrics.parquet"):
        TrainState.load(ckpt.latest(run)).restore(run, engine)
