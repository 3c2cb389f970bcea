"""Free-running training and the task's output vocabulary: the engine's loss equals a
hand-rolled loop (the authors' recipe), for a network that runs free natively (the GRU) and
for one that does not (the fixed-point passes); auto picks the authors' regime per family."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from study.models.base import build_model
from study.core.labels import IGNORE
from study.core.registry import get
from study.train.config import TrainConfig
from study.train.engine import Engine
from study.train.feed import feed_mask, free_logits, runs_free, settle
from study.core.outputs import Outputs
from study.train.runtime import Runtime

CPU = Runtime(torch.device("cpu"), None, False)
V, L = 6, 8


def _data(batch=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V, (batch, L), generator=g)  # (B, L)
    labels = torch.full_like(ids, IGNORE)
    labels[:, 2:6] = ids[:, 3:7]  # scored 2..5: inputs 3..6 are the model's own when free
    return ids, labels


class CausalGRU(nn.Module):
    """A causal network without `feed=`: the engine must run it to the fixed point."""

    n_layers, n_heads = 1, 0

    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(V, 8), nn.Linear(8, V)
        self.rnn = nn.GRU(8, 8, batch_first=True)

    def forward(self, ids, readout=None):  # (B, L) -> (B, L, V) or (n_true, V)
        h, _ = self.rnn(self.emb(ids))
        return self.out(h if readout is None else h[readout])


def _greedy(model, ids, feed):
    """The authors' loop by hand: left to right, a fed input is the argmax one step before."""
    cur = ids.clone()
    with torch.no_grad():
        for t in range(1, ids.shape[1]):
            if feed[:, t].any():
                pred = model(cur[:, :t])[:, -1].argmax(-1)  # (B,)
                cur[feed[:, t], t] = pred[feed[:, t]]
    return cur


def test_feed_mask_follows_the_scored_positions():
    labels = torch.tensor([[IGNORE, IGNORE, 3, 4, 2, IGNORE, IGNORE]])
    # inputs 3 and 4 follow scored positions and precede a scored one; input 5 (after the
    # last scored position) changes no scored output and stays the true token
    assert feed_mask(labels).tolist() == [[False, False, False, True, True, False, False]]


def test_settle_equals_the_greedy_loop_for_a_network_without_feed():
    torch.manual_seed(0)
    model = CausalGRU().eval()
    ids, labels = _data()
    feed = feed_mask(labels)
    assert torch.equal(settle(model, ids, feed), _greedy(model, ids, feed))


@pytest.mark.parametrize("family", ["gru", "fixed_point"])
def test_free_running_engine_loss_equals_a_hand_rolled_loop(family):
    torch.manual_seed(1)
    if family == "gru":
        entry = get("model", "gru")
        model = build_model(entry, entry.make_config("smoke", {"dropout": 0.0}), V, L)
    else:
        model = CausalGRU()
    ids, labels = _data(seed=2)
    feed = feed_mask(labels)
    mask = labels != IGNORE
    want = F.cross_entropy(model(_greedy(model, ids, feed))[mask], labels[mask])
    engine = Engine(model, TrainConfig(feed_outputs="free"), CPU)
    got = engine._forward_loss(ids, labels, feed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    teacher = Engine(model, TrainConfig(feed_outputs="teacher"), CPU)
    teacher = teacher._forward_loss(ids, labels, feed)
    assert not torch.allclose(got, teacher)  # a random network: its own outputs are not the data


def test_auto_is_free_for_recurrent_families_and_teacher_for_the_others():
    for name, free in (("gru", True), ("lstm", True), ("attn2", False)):
        entry = get("model", name)
        model = build_model(entry, entry.make_config("smoke"), V, L)
        assert runs_free("auto", model) is free
        assert runs_free("teacher", model) is False and runs_free("free", model) is True


def test_free_logits_readout_matches_full_logits():
    torch.manual_seed(3)
    entry = get("model", "lstm")
    model = build_model(entry, entry.make_config("smoke"), V, L).eval()
    ids, labels = _data(seed=4)
    feed, mask = feed_mask(labels), labels != IGNORE
    full = free_logits(model, ids, feed)
    torch.testing.assert_close(free_logits(model, ids, feed, readout=mask), full[mask])


def test_output_space_scores_only_the_task_outputs():
    out = Outputs.of((1, 3, 4), V, torch.device("cpu"))
    logits = torch.randn(2, 3, V)
    labels = torch.tensor([[IGNORE, 3, 4], [1, IGNORE, 3]])
    assert out.targets(labels).tolist() == [[IGNORE, 1, 2], [0, IGNORE, 1]]
    logits[0, 1, 0] = 100.0  # a huge non-output logit never wins
    assert out.predict(logits)[0, 1].item() in (1, 3, 4)
    want = F.cross_entropy(logits[..., [1, 3, 4]].transpose(1, 2), out.targets(labels),
                           ignore_index=IGNORE)
    got = F.cross_entropy(out.logits(logits).transpose(1, 2), out.targets(labels),
                          ignore_index=IGNORE)
    torch.testing.assert_close(got, want)
    assert Outputs.of(None, V, torch.device("cpu")).whole
    assert Outputs.of(tuple(range(V)), V, torch.device("cpu")).whole


def test_assign_add_engine_loss_is_over_the_numbers():
    task_entry = get("task", "assign_add")
    task = task_entry.obj(task_entry.make_config("smoke"))
    assert task.output_ids == tuple(range(task.config.p))
    entry = get("model", "attn2")
    torch.manual_seed(0)
    model = build_model(entry, entry.make_config("smoke"), len(task.vocab), task.seq_len)
    ex = task.split("val").take(slice(0, 8))
    ids = torch.as_tensor(ex.ids.astype("int64"))
    labels = torch.as_tensor(ex.labels.astype("int64"))
    engine = Engine(model, TrainConfig(), CPU, task.output_ids, len(task.vocab))
    got = engine._forward_loss(ids, labels, feed_mask(labels))
    mask = labels != IGNORE
    want = F.cross_entropy(model(ids)[mask][:, :task.config.p], labels[mask])  # logits[:, :MOD]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
