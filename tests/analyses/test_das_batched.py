"""DAS restarts trained together (`study/analyses/das/batched.py`, `study/analyses/das/stacked.py`) give
what training them one after another gives: same updates per restart, same alignments,
same chosen restart and the same right/wrong per pair, on a recurrent state site and a
transformer residual site, for OAF and LAF.

Alignments are compared by the map their interchange applies, P = A D_k A^-1 (D_k keeps the
first k coordinates), not by raw parameters: some directions of the parameters do not change
P (a rotation inside the first k dims or inside the rest; a LAF's column signs and bias,
which cancel out of P), their gradient is float noise in both paths, and Adam, whose first
step is lr * sign(gradient), moves them by about lr either way. The network's forward over
a batch of R * b rows rounds differently from R forwards of b rows, so P drifts apart by
float noise over the steps (measured: up to ~2e-5 after 30 steps from fresh starts; more for
a rotated LAF, whose start W = I sits where gauge moves feed back into P), against ~0.1 and
more between restarts; with one restart on the residual stream, where
the forward is the same, the two paths agree to the last bit."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from study.analyses.das import DasConfig
from study.analyses.das.alignment import cached_maps, make_alignment
from study.analyses.das.batched import train_restarts
from study.analyses.das.search import fit, site_data, train
from study.analyses.das.stacked import StackedAlignment
from tests.conftest import frozen_smoke_model as _smoke

SITES = {"gru": ("state", 0), "rope2": ("resid", 1)}  # recurrent state, transformer stream
TOL = dict(rtol=1e-4, atol=5e-5)  # P of restarts from fresh draws, a few dozen steps
DRIFT = dict(rtol=0.0, atol=5e-3)  # P of a chosen restart, a rotated LAF's included


def interchange_map(inst) -> torch.Tensor:
    """P (d, d) = A D_k A^-1: the interchange in standardised space is x_s P + x_b (I - P)."""
    with torch.no_grad():
        a = inst.matrix().double()
        keep = (torch.arange(a.shape[0]) < inst.k).to(a.dtype)
        return (a * keep) @ torch.linalg.inv(a)


def _data(model_name, n_train=128, n_test=64):
    task, model, _ = _smoke("counting", model_name)
    kind, layer = SITES[model_name]
    train_pairs = task.counterfactuals("up_down:count", n_train, split="train", seed=0)
    test_pairs = task.counterfactuals("up_down:count", n_test, split="test", seed=0)
    return model, site_data(model, train_pairs, test_pairs, kind, layer, -1, "cpu")


@pytest.mark.parametrize("name", ["oaf", "laf"])
def test_a_stack_interchanges_each_chunk_of_rows_with_its_own_member(name):
    d, b = 8, 4
    members = [make_alignment(name, d, 3, seed, "rotated") for seed in range(3)]
    for i, m in enumerate(members):
        m.fit_standardisation(torch.randn(50, d) * (i + 1) + i)
    stack = StackedAlignment(members)
    g = torch.Generator().manual_seed(0)
    base, source = torch.randn(3 * b, d, generator=g), torch.randn(3 * b, d, generator=g)
    few = torch.zeros(3 * b, dtype=torch.bool)
    few[[1, 6, 11]] = True  # one row of each chunk: interchanged row by row
    for rows in (torch.rand(3 * b, generator=g) > 0.3, few):  # (3 b,) the rows intervened on
        with cached_maps(stack):
            out = stack(base, source, rows)
        ref = torch.cat([m(base[j * b:(j + 1) * b], source[j * b:(j + 1) * b],
                           rows[j * b:(j + 1) * b]) for j, m in enumerate(members)])
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(out[~rows], base[~rows])  # unselected rows pass through exactly
    # only the members in the batch enter the graph: the others get no gradient at all
    stack.active = [0, 2]
    stack(base[:2 * b], source[:2 * b]).sum().backward()
    assert all(p.grad is None for p in members[1].parameters())
    assert all(p.grad is not None for p in members[0].parameters() if p.requires_grad)


@pytest.mark.parametrize("model_name", list(SITES))
@pytest.mark.parametrize("name", ["oaf", "laf", "laf_sd"])
def test_restarts_trained_together_are_the_restarts_trained_alone(model_name, name):
    """Same updates per restart (the stopping rules fire at different steps: a stopped
    restart stays where it stopped while the others go on) and the same alignments (a
    rotated LAF, started at W = I, to the looser DRIFT)."""
    model, data = _data(model_name)
    width = data.src_train.shape[1]
    budget = dict(steps=30, batch_size=32, lr=5e-3, stop_iia=1.0, patience=3, lr_floor=0.05)
    seeds = [5, 6, 7]

    def starts():
        insts = [make_alignment(name, width, 2, 10 + r, "rotated") for r in range(3)]
        for inst in insts:
            inst.fit_standardisation(data.fit_acts)
        return insts

    alone, together = starts(), starts()
    n_alone = [train(model, data, inst, seed=s, **budget) for inst, s in zip(alone, seeds)]
    n_together = train_restarts(model, data, together, seeds=seeds, **budget)
    assert n_together == n_alone
    assert 0 < min(n_alone) < budget["steps"]  # the plateau rule stopped some restart early
    for a, b in zip(alone, together):
        torch.testing.assert_close(interchange_map(b), interchange_map(a),
                                   **(DRIFT if name == "laf" else TOL))


@pytest.mark.parametrize("model_name", list(SITES))
def test_fit_batched_chooses_and_scores_as_fit_one_after_another(model_name):
    """OAF, both LAFs and the random control (as `search` runs them): the chosen restart's
    alignment, each pair's right/wrong on both splits and the restart spread."""
    model, data = _data(model_name)
    cfg = replace(DasConfig(), k=(2,), steps=24, batch_size=32, lr=5e-3, restarts=3,
                  patience=4, laf_form="rotated", eval_batch_size=64)
    got = {}
    for batched in (False, True):
        got[batched] = tuple(fit(model, data, name, 2, cfg, seed=3 + i, batched=batched)
                             for i, name in enumerate(("oaf", "laf", "laf_sd", "random")))
    for seq, bat in zip(got[False], got[True]):
        torch.testing.assert_close(interchange_map(bat.inst), interchange_map(seq.inst),
                                   **DRIFT)
        for split in ("train", "test"):
            np.testing.assert_array_equal(bat.right[split], seq.right[split])
            np.testing.assert_allclose(bat.restart_sd[split], seq.restart_sd[split],
                                       rtol=1e-6, equal_nan=True)


def test_one_restart_trained_as_a_stack_is_that_restart_trained_alone():
    """Where the network's forward is the same (one chunk, the residual stream), nothing is
    left to differ: the loss, Adam, the schedule and the stopping rules are the same."""
    model, data = _data("rope2")
    width = data.src_train.shape[1]
    budget = dict(steps=20, batch_size=32, lr=5e-3, stop_iia=1.0, patience=3, lr_floor=0.05)
    got = []
    for batched in (False, True):
        inst = make_alignment("laf", width, 2, 10, "rotated")
        inst.fit_standardisation(data.fit_acts)
        n = (train_restarts(model, data, [inst], seeds=[5], **budget)[0] if batched
             else train(model, data, inst, seed=5, **budget))
        got.append((n, inst))
    assert got[0][0] == got[1][0]
    for p, q in zip(got[0][1].parameters(), got[1][1].parameters()):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
