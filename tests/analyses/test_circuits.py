"""Circuit scores on hand-built attention patterns, head ablation on a fake two-head model,
the Fourier measure, the task attention targets, and the analysis at scale=smoke."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from study.analyses.circuits.attn2_views import _prev_pos
from study.analyses.circuits.scores import (fourier_fraction, induction_score, prev_token_score,
                                      target_sums)
from study.analyses.circuits.ablation import ablation_rows
from study.analyses.common.context import AnalysisContext
from study.models.sites.modules import Sites
from study.core import registry


def _uniform(n_pos):
    causal = torch.ones(n_pos, n_pos).tril()
    return (causal / causal.sum(-1, keepdim=True))[None, None]  # (1, 1, pos, pos)


def test_prev_token_score_shifted_identity_is_one_and_uniform_is_low():
    n = 20
    shifted = torch.zeros(n, n)
    shifted[0, 0] = 1
    shifted[torch.arange(1, n), torch.arange(n - 1)] = 1
    assert prev_token_score(shifted[None, None]).item() == pytest.approx(1.0)
    assert prev_token_score(_uniform(n)).item() < 0.25
    live = torch.ones(1, n, dtype=torch.bool)
    live[0, 10:] = False  # padding is left out of the average
    assert prev_token_score(shifted[None, None], live).item() == pytest.approx(1.0)


def test_induction_score_of_an_induction_pattern():
    T = 8
    pat = torch.zeros(2 * T, 2 * T)
    pat[torch.arange(T), torch.arange(T)] = 1  # first half: attend to self
    q = torch.arange(T, 2 * T)
    pat[q, q - T + 1] = 1  # second half: the token after the previous occurrence
    assert induction_score(pat[None, None], T).item() == pytest.approx(1.0)
    prev = torch.zeros(2 * T, 2 * T)
    prev[0, 0] = 1
    prev[torch.arange(1, 2 * T), torch.arange(2 * T - 1)] = 1
    assert induction_score(prev[None, None], T).item() == pytest.approx(0.0)
    assert induction_score(_uniform(2 * T), T).item() < 0.15


def test_target_mass_and_topk_criterion():
    pat = torch.tensor([[0.1, 0.5, 0.4, 0.0], [0.6, 0.1, 0.2, 0.1]])  # two heads, query pos 3
    pattern = torch.zeros(1, 2, 4, 4)
    pattern[0, :, 3] = pat
    query = torch.tensor([[False, False, False, True]])
    keys = torch.tensor([[False, True, True, False]])
    mass, hits, rows = target_sums(pattern, query, keys)
    assert mass.tolist() == pytest.approx([0.9, 0.3]) and rows == 1.0
    assert hits.tolist() == [1.0, 0.0]  # head 0's top-2 are exactly the keys; head 1's not
    # keys per query row (b, pos_q, pos_k): the same keys on every row give the same sums,
    # and each row is scored against its own keys
    per_row = keys[:, None, :].expand(-1, 4, -1)
    assert [t.tolist() for t in target_sums(pattern, query, per_row)[:2]] == [
        mass.tolist(), hits.tolist()]
    pattern[0, :, 2] = pat[:, [0, 1, 3, 2]]  # a second query row, with keys 1 and 3 its own
    own = per_row.clone()
    own[0, 2] = torch.tensor([False, True, False, True])
    mass, hits, rows = target_sums(pattern, torch.tensor([[False, False, True, True]]), own)
    assert mass.tolist() == pytest.approx([0.9 + 0.9, 0.3 + 0.3]) and rows == 2.0
    assert hits.tolist() == [2.0, 0.0]


class _TwoHeads(nn.Module):
    """Fake model: head 0 copies the first token, head 1 carries the current token; W_O
    reads head 0 into the logits and (when `dead`) nothing from head 1."""

    def __init__(self, vocab: int, dead: bool = True):
        super().__init__()
        self.config = SimpleNamespace(n_heads=2)
        self.sites = Sites(head=1)
        self.vocab = vocab
        w = torch.zeros(2 * vocab, vocab)
        w[:vocab] = 5 * torch.eye(vocab)
        if not dead:
            w[vocab:] = torch.eye(vocab)
        self.W_O = nn.Parameter(w, requires_grad=False)

    def forward(self, ids):
        first = nn.functional.one_hot(ids[:, :1].expand_as(ids), self.vocab).float()
        here = nn.functional.one_hot(ids, self.vocab).float()
        return self.sites.head[0](torch.cat([first, here], -1)) @ self.W_O


def test_ablating_a_needed_head_hurts_and_a_dead_head_changes_nothing():
    V, n = 6, 60
    rng = np.random.default_rng(0)
    ids = rng.integers(1, V, size=(n, 5))
    labels = np.full_like(ids, -1)
    labels[:, -1] = ids[:, 0]  # answer: the first token
    task = SimpleNamespace(name="fake", pad_id=0, stratum_label=lambda k, v: f"{k}={v}")
    strata = {"group": np.arange(n) % 2}
    rows = ablation_rows(_TwoHeads(V), task, ids, labels, strata, torch.device("cpu"), n_heads=2)
    acc = {(layer, head, method, stratum): a for layer, head, method, stratum, a in rows}
    assert acc[(-1, -1, "none", "all")] == 1.0
    assert acc[(0, 0, "zero", "all")] < 0.5 and acc[(0, 0, "mean", "all")] < 0.5
    assert acc[(0, 1, "zero", "all")] == 1.0 and acc[(0, 1, "mean", "all")] == 1.0
    assert {"group=0", "group=1"} <= {s for *_, s in acc}


def test_fourier_fraction_of_cosines_is_one_and_of_noise_is_low():
    p = 59
    x = np.arange(p)[:, None]
    rng = np.random.default_rng(0)
    amp, phase = rng.normal(size=(2, 32)), rng.uniform(0, 6.3, size=(2, 32))
    M = (amp[0] * np.cos(2 * np.pi * 3 * x / p + phase[0])
         + amp[1] * np.cos(2 * np.pi * 11 * x / p + phase[1]))
    frac, freqs = fourier_fraction(M + 0.5, 2)
    assert frac == pytest.approx(1.0) and sorted(freqs) == [3, 11]
    noise, _ = fourier_fraction(rng.normal(size=(p, 32)), 2)
    assert noise < 0.3


def test_positional_prev_score_reads_the_subdiagonal():
    n = 10
    scores = torch.randn(n, n) * 0.1
    scores[torch.arange(1, n), torch.arange(n - 1)] = 5.0
    assert _prev_pos(scores) == 1.0
    assert _prev_pos(-scores) < 0.5


def test_binding_chain_and_assign_add_targets_follow_the_programs():
    from study.tasks.binding.causal import interpret, on_chain

    e = registry.get("task", "binding")
    task = e.obj(e.make_config("smoke"))
    ids = task.split("test").ids[:40].astype(np.int64)
    p = interpret(ids)
    chain = on_chain(p)
    for i in range(len(ids)):
        lines = np.flatnonzero(chain[i])
        assert len(lines) == p["depth"][i] and lines[0] == p["root_line"][i]
    e = registry.get("task", "assign_add")
    task = e.obj(e.make_config("smoke"))
    ids = task.split("test").ids[:40].astype(np.int64)
    _, values = task.attention_targets(ids)["values"]
    x, y = task.operands(ids)
    got = [sorted(ids[i, values[i]].tolist()) for i in range(len(ids))]
    assert got == [sorted([int(a), int(b)]) for a, b in zip(x, y)]


def _ctx(task_name, model_name, tmp_path):
    te = registry.get("task", task_name)
    task = te.obj(te.make_config("smoke"))
    me = registry.get("model", model_name)
    torch.manual_seed(0)
    model = me.obj(me.make_config("smoke"), len(task.vocab), task.seq_len).eval()
    cfg = registry.get("analysis", "circuits").make_config("smoke")
    return AnalysisContext(model, task, cfg, model_name, 3, torch.device("cpu"),
                           tmp_path, 0)


@pytest.mark.parametrize("task_name,model_name", [("assign_add", "attn2"), ("counting", "rope2")])
def test_circuits_runs_at_smoke(task_name, model_name, tmp_path):
    ctx = _ctx(task_name, model_name, tmp_path)
    out = registry.get("analysis", "circuits").obj(ctx)
    circ, abl = out["circuits"], out["ablation"]
    assert list(circ.columns) == ["checkpoint", "layer", "head", "score", "value"]
    assert list(abl.columns) == ["checkpoint", "layer", "head", "method", "split", "stratum",
                                 "accuracy"]
    scores = set(circ.score)
    assert {"prev_token", "induction"} <= scores
    if task_name == "assign_add":
        assert {"attn_to_operands", "attn_to_values", "attn_to_prev_var", "attn_num_to_prev",
                "attn_eq_to_operands", "attn_eq_to_values", "probe_var_from_num", "ov_mlp_accuracy", "fourier_frac",
                "cos_premlp_ov", "cos_premlp_ov_shuffled", "qk_num_to_prev_var",
                "ov_copy_frac"} <= scores
        assert any(s.startswith("pool=") for s in abl.stratum)
    else:
        assert {"attn_to_trigger", "attn_to_demos"} <= scores
    fractions = circ[~circ.score.str.startswith(("fourier_freq", "cos_"))]
    assert fractions.value.between(0, 1 + 1e-6).all()
    assert set(abl.method) == {"none", "zero", "mean"}
    assert abl.accuracy.between(0, 1).all() and (abl.checkpoint == 3).all()


def test_trajectory_scores_every_earlier_checkpoint_as_if_analysed_there(tmp_path):
    """circuits.trajectory: the rows at each earlier logged step equal what the analysis gives
    on that step's network, the ablation stays at the analysed step, and the report draws the
    progress measures along training from them."""
    from dataclasses import replace

    from study.reports.sections.circuits import along_training

    ctx = _ctx("assign_add", "attn2", tmp_path)
    me = registry.get("model", "attn2")
    nets = {}
    for step in (0, 1):
        torch.manual_seed(10 + step)
        nets[step] = me.obj(me.make_config("smoke"), len(ctx.task.vocab), ctx.task.seq_len).eval()
    traj = replace(ctx, config=replace(ctx.config, trajectory=True),
                   model_at=lambda s: nets[s], steps=(0, 1, 3, 7))
    out = registry.get("analysis", "circuits").obj(traj)
    circ = out["circuits"]
    assert sorted(set(circ.checkpoint)) == [0, 1, 3]  # never past the analysed weights
    assert (out["ablation"].checkpoint == 3).all()
    run = registry.get("analysis", "circuits").obj
    for step in (0, 1):
        alone = run(replace(ctx, model=nets[step], checkpoint=step))["circuits"]
        got = circ[circ.checkpoint == step].reset_index(drop=True)
        assert got.drop(columns="value").equals(alone.drop(columns="value"))
        assert np.allclose(got.value, alone.value, equal_nan=True)
    fake = SimpleNamespace(label="attn2 s0", tables={"circuits": circ})
    t = along_training([fake])
    assert sorted(set(t.checkpoint)) == [0, 1, 3]
    assert {"attn_eq_to_operands", "attn_num_to_prev", "probe_var_from_num"} <= set(t.measure)
    assert not t.duplicated(["checkpoint", "measure"]).any()  # one layer per measure
