"""The training engine, checkpoints and the training benchmark, on a tiny task and network
defined here: recall the first token of a sequence at the query position."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from study.models.sites.modules import Sites
from study.train import checkpoint as ckpt
from study.checks.bench_train import bench_train
from study.core.registry import get, register
from study.core.rundir import RunDir
from study.train.streams import ShuffledStream, loss_targets, used_length
from study.train.loop import train
from study.train.schedule import checkpoint_steps, lr_at
from study.train.config import TrainConfig
from study.tasks.base import IGNORE, Examples, Task

# --- a tiny task ---------------------------------------------------------------------------
VOCAB = ("PAD", "Q") + tuple(f"d{i}" for i in range(8)) + tuple(f"f{i}" for i in range(4))
PAD, Q, D0, F0 = 0, 1, 2, 10


@dataclass(frozen=True)
class RecallConfig:
    n_train: int = 384
    n_eval: int = 96
    seed: int = 0
    on_the_fly: bool = False


class Recall(Task):
    """d_x f.. f Q -> d_x, 1-4 fillers; seq_len 8 but arrays are 7 wide (compact dtypes) and
    no example is longer than 6 tokens. `gen_noise` has random answers, so no model can reach
    a target accuracy on it."""

    name = "test_recall"
    eval_splits = ("val", "test", "gen_noise")

    vocab = VOCAB
    seq_len = 8
    splits = ("train", "val", "test", "gen_noise")

    def _make(self, n: int, rng, noise: bool = False) -> Examples:
        ids = np.full((n, 7), PAD, np.uint8)
        labels = np.full((n, 7), IGNORE, np.int8)
        x, gap = rng.integers(0, 8, n), rng.integers(1, 5, n)
        for i in range(n):
            ids[i, 0] = D0 + x[i]
            ids[i, 1:1 + gap[i]] = F0 + rng.integers(0, 4, gap[i])
            ids[i, 1 + gap[i]] = Q
            labels[i, 1 + gap[i]] = D0 + (rng.integers(0, 8) if noise else x[i])
        return Examples(ids, labels, {"gap": gap})

    def generate(self, split: str) -> Examples:
        rng = np.random.default_rng([self.config.seed, self.splits.index(split)])
        n = self.config.n_train if split == "train" else self.config.n_eval
        return self._make(n, rng, noise=split == "gen_noise")

    def train_batch(self, step: int, batch_size: int):
        if not self.config.on_the_fly:
            return None
        return self._make(batch_size, np.random.default_rng([self.config.seed, 99, step]))

    def render(self, ids) -> str:
        return " ".join(VOCAB[i] for i in ids if i != PAD)

    def label_of(self, labels):
        return VOCAB[int(labels[labels != IGNORE][0])]

    def counterfactuals(self, kind, n, split="test", seed=0):
        raise NotImplementedError


# --- a tiny network with dropout (so resuming must restore the RNG) --------------------------
@dataclass(frozen=True)
class FakeNetConfig:
    d: int = 16
    hidden: tuple[int, ...] = (32,)
    dropout: float = 0.1


class FakeNet(nn.Module):
    """The smallest network contract: no sites, no capabilities."""

    n_layers, n_heads = 1, 0

    def __init__(self, cfg: FakeNetConfig, vocab_size: int):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, cfg.d)
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = nn.GRU(cfg.d, cfg.hidden[0], batch_first=True)
        self.out = nn.Linear(cfg.hidden[0], vocab_size)
        self.sites = Sites()

    def site_kinds(self) -> list:
        return []

    def forward(self, ids, readout=None):  # (B, L) -> (B, L, V), or (n_true, V) with readout
        h, _ = self.rnn(self.drop(self.emb(ids)))
        return self.out(self.drop(h if readout is None else h[readout]))


def build_fake(cfg: FakeNetConfig, vocab_size: int, seq_len: int) -> nn.Module:
    assert isinstance(cfg.hidden, tuple), "configs reach builders with tuples, not lists"
    return FakeNet(cfg, vocab_size)


register("model", "test_fake_gru", config=FakeNetConfig)(build_fake)
register("task", "test_recall", config=RecallConfig)(Recall)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path / "cache"))



def _run(path, steps=60, seed=3, callback=None, task_cfg=RecallConfig(), **train):
    cfg = TrainConfig(steps=steps, batch_size=32, lr=1e-2, warmup_steps=5, checkpoints=5,
                      eval_examples=0, resume_minutes=0, **train)
    return train_fn(RunDir(path), Recall(task_cfg), get("model", "test_fake_gru"),
                    FakeNetConfig(), cfg, seed, callback=callback)


train_fn = train


def _interrupt_at(k):
    def cb(step):
        if step == k:
            raise KeyboardInterrupt
    return cb


def _weights(path):
    return load_file(str(ckpt.checkpoints_dir(path) / ckpt.dir_name(ckpt.list_checkpoints(path)[-1])
                         / ckpt.WEIGHTS))


# --- schedules -----------------------------------------------------------------------------
@pytest.mark.parametrize("steps,n", [(105_400, 24), (1000, 24), (40, 24), (10, 24), (7, 3)])
def test_checkpoint_schedule_is_log_spaced_and_ends_at_final(steps, n):
    s = checkpoint_steps(steps, n)
    assert s[0] == 0 and s[1] == 1 and s[-1] == steps
    assert all(a < b for a, b in zip(s, s[1:]))
    assert len(s) == min(n, steps) + 1
    if steps > 10 * n:  # geometric: about half of them at or below sqrt(steps)
        assert sum(x <= steps ** 0.5 for x in s[1:]) >= n // 2 - 1


def test_lr_schedules():
    base = dict(steps=100, lr=1.0, warmup_steps=10)
    lin = TrainConfig(**base, schedule="linear")
    assert [lr_at(lin, s) for s in (0, 5, 10, 55, 100)] == pytest.approx([0, 0.5, 1, 0.5, 0])
    const = TrainConfig(**base, schedule="constant")
    assert [lr_at(const, s) for s in (5, 10, 99)] == pytest.approx([0.5, 1, 1])
    exp = TrainConfig(**base, schedule="exp", decay_rate=0.5, decay_steps=20, min_lr=0.1)
    assert [lr_at(exp, s) for s in (10, 29, 30, 50, 70, 90)] == pytest.approx(
        [1, 1, 0.5, 0.25, 0.125, 0.1])
    inv = TrainConfig(**base, schedule="inverse_sqrt", decay_rate=0.5, min_lr=0.32)
    assert [lr_at(inv, s) for s in (5, 10, 40, 90, 100)] == pytest.approx([0.5, 1, 0.5, 1 / 3, 0.32])


def test_loss_targets_answer_and_all():
    ids = torch.tensor([[5, 6, 7, PAD]])
    labels = torch.tensor([[IGNORE, IGNORE, 9, IGNORE]])
    assert loss_targets(ids, labels, "answer", PAD).tolist() == [[IGNORE, IGNORE, 9, IGNORE]]
    # next tokens, PAD ignored, the scored label wins where there is one
    assert loss_targets(ids, labels, "all", PAD).tolist() == [[6, 7, 9, IGNORE]]


def test_stream_trims_and_visits_every_example_once_per_epoch():
    ex = Recall(RecallConfig()).generate("val")
    assert used_length(ex.ids, ex.labels, PAD) == 6
    stream = ShuffledStream(ex.ids[:10], ex.labels[:10], 3, seed=1, device=torch.device("cpu"),
                            loss_on="answer", pad_id=PAD)
    rows = torch.cat([stream.batch(i)[0] for i in range(10)])  # 30 rows = 3 epochs
    assert rows.shape == (30, 6)
    first = {tuple(r) for r in rows[:10].tolist()}
    assert first == {tuple(r) for r in ex.ids[:10, :6].tolist()}
    assert not torch.equal(rows[:10], rows[10:20])  # a new order each epoch


# --- training ------------------------------------------------------------------------------
def test_training_learns_and_writes_the_run_dir(tmp_path):
    summary = _run(tmp_path, steps=150)
    m = pd.read_parquet(tmp_path / "metrics.parquet")
    assert list(m.columns) == ["step", "split", "stratum", "metric", "value"]
    assert set(m["split"]) == {"train", "val", "test", "gen_noise"}
    assert {"all", "gap=1", "gap=4"} <= set(m["stratum"])
    loss = m[(m.split == "train") & (m.metric == "loss")]["value"].to_numpy()
    assert loss[-10:].mean() < 0.5 * loss[:10].mean()
    test0 = m[(m.step == 0) & (m.split == "test") & (m.stratum == "all") & (m.metric == "accuracy")]
    assert test0["value"].item() < 0.4 and summary["test_accuracy"] > 0.9
    assert summary["accuracy"]["test"]["gap=2"] > 0.8 and summary["steps_done"] == 150
    assert ckpt.list_checkpoints(tmp_path) == checkpoint_steps(150, 5)
    assert json.loads((tmp_path / "summary.json").read_text())["test_accuracy"] == summary["test_accuracy"]

    # the final checkpoint rebuilds, from meta.json alone, a network scoring the same
    model, meta = ckpt.load_model(tmp_path, "final")
    assert meta["step"] == 150 and meta["model_config"]["hidden"] == [32]
    test = Recall(RecallConfig()).split("test")
    with torch.no_grad():
        pred = model(torch.from_numpy(test.ids.astype(np.int64))).argmax(-1).numpy()
    scored = test.labels != IGNORE
    assert (pred[scored] == test.labels[scored]).mean() == pytest.approx(summary["test_accuracy"])
    assert ckpt.load_task(meta).config == RecallConfig()


@pytest.mark.parametrize("on_the_fly", [False, True])
def test_resumed_run_equals_uninterrupted(tmp_path, on_the_fly):
    task_cfg = RecallConfig(on_the_fly=on_the_fly)
    # log rows every 7 steps: the loss sums pending at an interruption must survive it
    _run(tmp_path / "a", task_cfg=task_cfg, log_every=7)
    # interrupted exactly at a checkpoint (22), then between checkpoints (31), then finished
    assert 22 in checkpoint_steps(60, 5) and 31 not in checkpoint_steps(60, 5)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "b", task_cfg=task_cfg, log_every=7, callback=_interrupt_at(22))
    assert ckpt.latest(tmp_path / "b").name == "step_00000022"
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "b", task_cfg=task_cfg, log_every=7, callback=_interrupt_at(31))
    assert ckpt.latest(tmp_path / "b").name == "resume_00000031"
    b = _run(tmp_path / "b", task_cfg=task_cfg, log_every=7)
    wa, wb = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    ma = pd.read_parquet(tmp_path / "a" / "metrics.parquet")
    mb = pd.read_parquet(tmp_path / "b" / "metrics.parquet")
    pd.testing.assert_frame_equal(ma, mb, check_exact=True)
    assert b["steps_done"] == 60
    assert ckpt.list_checkpoints(tmp_path / "a") == ckpt.list_checkpoints(tmp_path / "b")


def _sigint_at(k):
    def cb(step):
        if step == k:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, deferred to the step's end
    return cb


def test_interrupt_then_resume_twice(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, callback=_sigint_at(20))
    assert ckpt.latest(tmp_path).name == "resume_00000020"
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, callback=_interrupt_at(40))
    # the two newest states are kept: the older resume point is gone
    assert ckpt.latest(tmp_path).name == "resume_00000040"
    assert not (ckpt.checkpoints_dir(tmp_path) / "resume_00000020").exists()
    assert _run(tmp_path)["steps_done"] == 60
    assert sorted(p.name for p in ckpt.checkpoints_dir(tmp_path).iterdir()
                  if (p / ckpt.STATE).exists()) == ["resume_00000040", "step_00000060"]


def test_ctrl_c_then_resume_equals_uninterrupted(tmp_path):
    # a real Ctrl-C (deferred to the end of step 26: between checkpoints and log rows), then a finish
    _run(tmp_path / "a", log_every=7)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "b", log_every=7, callback=_sigint_at(26))
    assert ckpt.latest(tmp_path / "b").name == "resume_00000026"
    b = _run(tmp_path / "b", log_every=7)
    wa, wb = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / "metrics.parquet"),
                                  pd.read_parquet(tmp_path / "b" / "metrics.parquet"), check_exact=True)
    sa = json.loads((tmp_path / "a" / "summary.json").read_text())
    timing = ("wall_time_s", "train_time_s", "steps_per_s", "tokens_per_s")
    assert {k: v for k, v in sa.items() if k not in timing} == \
        {k: v for k, v in b.items() if k not in timing}


def test_target_accuracy_stops_early_ignoring_generalisation_sets(tmp_path):
    summary = _run(tmp_path, steps=2000, target_accuracy=0.9, eval_every=10)
    done = summary["steps_done"]
    assert summary["stopped_early"] and done < 2000 and done % 10 == 0
    assert summary["accuracy"]["val"]["all"] >= 0.9 and summary["accuracy"]["test"]["all"] >= 0.9
    assert summary["accuracy"]["gen_noise"]["all"] < 0.9  # it did not hold training back
    assert ckpt.list_checkpoints(tmp_path)[-1] == done
    # a finished run is not trained again
    assert _run(tmp_path, steps=2000, target_accuracy=0.9, eval_every=10)["steps_done"] == done


def test_time_budget_ends_training_with_an_evaluated_final_checkpoint(tmp_path):
    summary = _run(tmp_path, steps=100_000, max_minutes=0.002)  # 0.12 s of wall time
    done = summary["steps_done"]
    assert summary["time_limited"] and summary["stopped_early"] and 0 < done < 100_000
    assert ckpt.list_checkpoints(tmp_path)[-1] == done  # the last state is kept
    assert "all" in summary["accuracy"]["val"]  # and scored
    # a run that ended on its budget counts as finished: it is not trained again
    assert _run(tmp_path, steps=100_000, max_minutes=0.002)["steps_done"] == done


# --- checkpoints ---------------------------------------------------------------------------
def test_truncated_or_bad_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, callback=_interrupt_at(20))
    # both kept training states damaged: nothing to fall back to, one error naming the files
    previous, last = [p for _, p in ckpt.state_dirs(tmp_path)]
    weights = last / ckpt.WEIGHTS
    blob = weights.read_bytes()
    weights.write_bytes(blob[: len(blob) // 2])
    (previous / ckpt.META).write_text("{not json")
    with pytest.raises(ckpt.CheckpointError, match="no readable training state") as err:
        _run(tmp_path)
    assert str(weights) in str(err.value) and str(previous / ckpt.META) in str(err.value)
    assert (last / "model.safetensors.damaged").exists() and (previous / "meta.json.damaged").exists()
    with pytest.raises(ckpt.CheckpointError, match="none with a training state"):
        _run(tmp_path)
    # a logged checkpoint read by analyses
    first = ckpt.checkpoints_dir(tmp_path) / ckpt.dir_name(1)
    (first / ckpt.WEIGHTS).write_bytes(b"\x00" * 10)
    with pytest.raises(ckpt.CheckpointError, match=str(first / ckpt.WEIGHTS)):
        ckpt.load_model(tmp_path, 1)


def test_resume_refuses_a_different_config(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, callback=_interrupt_at(20))
    with pytest.raises(ckpt.CheckpointError, match="train_config.*lr"):
        train_fn(RunDir(tmp_path), Recall(RecallConfig()), get("model", "test_fake_gru"),
                 FakeNetConfig(), TrainConfig(steps=60, batch_size=32, lr=5e-3, warmup_steps=5,
                                              checkpoints=5, eval_examples=0, resume_minutes=0), 3)


class _Evil:
    def __reduce__(self):
        return (print, ("unpickled arbitrary code",))


def test_state_loads_with_weights_only_and_refuses_arbitrary_objects(tmp_path):
    _run(tmp_path, steps=20)
    last = ckpt.latest(tmp_path)
    state = torch.load(last / ckpt.STATE, weights_only=True)  # plain tensors and containers
    assert state["step"] == 20 and "optimizer" in state and "rng_cpu" in state
    torch.save({"step": 20, "x": _Evil()}, last / ckpt.STATE)
    with pytest.raises(ckpt.CheckpointError, match=str(last / ckpt.STATE)):
        ckpt.read_state(last)


def test_config_from_dict_restores_tuples():
    cfg = ckpt.config_from_dict(FakeNetConfig, json.loads(json.dumps(dataclasses.asdict(
        FakeNetConfig(hidden=(8, 4))))))
    assert cfg == FakeNetConfig(hidden=(8, 4))
    with pytest.raises(ckpt.CheckpointError, match="width"):
        ckpt.config_from_dict(FakeNetConfig, {"width": 3})


# --- benchmark -----------------------------------------------------------------------------
@pytest.mark.parametrize("on_the_fly", [False, True])
def test_bench_train_reports_both_variants(on_the_fly):
    df = bench_train(Recall(RecallConfig(on_the_fly=on_the_fly)), get("model", "test_fake_gru"),
                     FakeNetConfig(), TrainConfig(batch_size=16), steps=3, device="cpu",
                     engine_batch_size=32, warmup=1, peak_seconds=0.05)
    assert list(df["variant"]) == ["naive", "engine"]
    assert {"variant", "device", "batch_size", "steps_per_s", "tokens_per_s",
            "ratio_vs_naive"} <= set(df.columns)
    assert (df["steps_per_s"] > 0).all() and (df["tokens_per_s"] > 0).all()
    assert df["ratio_vs_naive"].iloc[0] == 1.0 and list(df["batch_size"]) == [16, 32]
    assert df["seq_len"].tolist() == [8, 8 if on_the_fly else 6]
    # model FLOP/s is tokens/s times one FLOP count, against one peak measured once
    per_token = df["model_gflop_per_s"] / df["tokens_per_s"]
    assert per_token.iloc[0] == pytest.approx(per_token.iloc[1]) and per_token.iloc[0] > 0
    assert df["peak_gflop_per_s"].nunique() == 1 and (df["frac_of_peak"] > 0).all()


def test_bench_train_measures_each_rows_peak_in_its_own_precision():
    df = bench_train(Recall(RecallConfig()), get("model", "test_fake_gru"), FakeNetConfig(),
                     TrainConfig(batch_size=16, precision="bf16"), steps=2, device="cpu",
                     warmup=1, peak_seconds=0.05)
    assert list(df["precision"]) == ["fp32", "bf16"]
    naive, engine = df["peak_gflop_per_s"]
    assert naive > 0 and engine > 0 and naive != engine  # two matmuls timed, one per dtype
    assert (df["frac_of_peak"] == df["model_gflop_per_s"] / df["peak_gflop_per_s"]).all()


def test_free_running_gru_resumes_bit_exactly(tmp_path):
    """A recurrent family trains free-running (auto) on counting; resuming stays exact."""
    te, me = get("task", "counting"), get("model", "gru")
    task_cfg, model_cfg = te.make_config("smoke"), me.make_config("smoke")
    cfg = TrainConfig(steps=12, batch_size=16, lr=1e-2, checkpoints=3, eval_examples=0,
                      resume_minutes=0)

    def run(path, callback=None):
        return train_fn(RunDir(path), te.obj(task_cfg), me, model_cfg, cfg, 1, callback=callback)

    assert run(tmp_path / "a")["inputs"] == "free"  # the resolved regime is summarised
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", callback=_interrupt_at(5))
    run(tmp_path / "b")
    wa, wb = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    ma = pd.read_parquet(tmp_path / "a" / "metrics.parquet")
    pd.testing.assert_frame_equal(ma, pd.read_parquet(tmp_path / "b" / "metrics.parquet"),
                                  check_exact=True)


def test_a_capped_evaluation_covers_every_part_of_a_stacked_split():
    """assign_add's `test` is the nine pools one after another: an evaluation capped at fewer
    examples than the split must still score every pool, not the first one only."""
    from study.train.evaluate import Evaluator
    from study.train.runtime import resolve_runtime

    entry = get("task", "assign_add")
    task = entry.obj(entry.make_config("smoke"))
    n = len(task.split("test"))
    cfg = TrainConfig(eval_examples=n // 4)
    ev = Evaluator(task, cfg, resolve_runtime(cfg))
    ids, _, groups = ev.splits["test"]
    pools = sorted(name for name, _ in groups if name.startswith("pool="))
    assert len(ids) == n // 4 and pools == [f"pool={i}" for i in range(9)]


def test_evaluating_every_split_at_once_equals_evaluating_each_alone():
    """The evaluator reads every split's results back at once, after all are computed; each
    split's metrics must be those of that split evaluated on its own, in small batches."""
    from study.train.evaluate import Evaluator
    from study.train.runtime import resolve_runtime

    class OneSplit:  # the task with a single eval split
        def __init__(self, task, name):
            self._task, self.eval_splits = task, (name,)

        def __getattr__(self, key):
            return getattr(self._task, key)

    entry = get("task", "binding")
    task = entry.obj(entry.make_config("smoke"))
    cfg = TrainConfig(eval_examples=64)
    rt = resolve_runtime(cfg)
    torch.manual_seed(0)
    me = get("model", "rope2")
    model = me.obj(me.make_config("smoke"), len(task.vocab), task.seq_len)
    rows = Evaluator(task, cfg, rt)(model, 3)
    together = {(r[1], r[2], r[3]): r[4] for r in rows}
    assert {r[1] for r in rows} == set(task.eval_splits) and len(task.eval_splits) > 1
    alone = {}
    for name in task.eval_splits:
        ev = Evaluator(OneSplit(task, name), cfg, rt)
        ev.batch = 7  # several small forward passes
        alone.update({(r[1], r[2], r[3]): r[4] for r in ev(model, 3)})
    assert together.keys() == alone.keys()
    for key, value in together.items():
        assert value == pytest.approx(alone[key], rel=1e-5, abs=1e-6), key


def test_binding_accuracy_per_depth_is_the_count_of_right_answers_in_that_depth():
    """The per-depth accuracy a researcher reads (stratum `depth=d`) is, on the test split,
    the number of programs of depth d answered right over the number of depth-d programs.
    The network is a table written by hand: it answers right on the programs chosen below
    (a pattern that cuts across depths) and one digit off on the others."""
    from study.train.evaluate import Evaluator
    from study.train.runtime import resolve_runtime

    entry = get("task", "binding")
    task = entry.obj(entry.make_config("smoke"))
    test = task.split("test")
    at = (test.labels != IGNORE).argmax(1)  # (n,) the one scored position, the final `:`
    answer = test.labels[np.arange(len(test)), at]  # (n,)
    right = np.arange(len(test)) % 3 != 1  # (n,) which programs the table answers right
    table = {}  # the program up to its `:` -> the table's answer (any answer on `val`)
    for row in task.split("val").ids:
        table[tuple(row[:at[0] + 1].tolist())] = 0
    for row, i, a, ok in zip(test.ids, at, answer, right):
        table[tuple(row[:i + 1].tolist())] = int(a) if ok else int(a) + 1
    assert len(table) == len(test) + len(task.split("val"))  # disjoint splits, no repeats

    class Table(torch.nn.Module):
        def forward(self, x):  # (b, L) -> (b, L, V), the table's answer at every position
            out = torch.zeros(*x.shape, len(task.vocab))
            for i, row in enumerate(x.tolist()):
                key = next(tuple(row[:j + 1]) for j in range(len(row))
                           if tuple(row[:j + 1]) in table)
                out[i, :, table[key]] = 1.0
            return out

    cfg = TrainConfig(eval_examples=0)
    rows = Evaluator(task, cfg, resolve_runtime(cfg))(Table(), 0)
    got = {r[2]: r[4] for r in rows if r[1] == "test" and r[3] == "accuracy"}
    depth = test.strata["depth"]
    assert len(set(depth.tolist())) == 4  # the smoke split holds every depth, 1 to 4
    for d in sorted(set(depth.tolist())):
        by_hand = right[depth == d].sum() / (depth == d).sum()
        assert got[f"depth={d}"] == pytest.approx(by_hand), d
    assert got["all"] == pytest.approx(right.mean())
