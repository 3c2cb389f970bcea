"""DAS alignments trained together, one batch of the loop (`study/analyses/das/loop.py`,
`study/analyses/das/stacked.py`), get what training each alone gets: same updates per
member, same alignments, same chosen restart and the same right/wrong per pair, on a
recurrent state site and a transformer residual site, for OAF and both LAFs, a kind's
restarts and kinds of one k with their own learning rates side by side.

Alignments are compared by the map their interchange applies, P = A D_k A^-1 (D_k keeps the
first k coordinates), not by raw parameters: some directions of the parameters do not change
P (a rotation inside the first k dims or inside the rest; a LAF's column signs and bias,
which cancel out of P), their gradient is float noise in both paths, and Adam, whose first
step is lr * sign(gradient), moves them by about lr either way. The network's forward over
a batch of R * b rows rounds differently from R forwards of b rows, so P drifts apart by
float noise over the steps (measured: up to ~2e-5 after 30 steps from fresh starts; more for
a rotated LAF, whose start W = I sits where gauge moves feed back into P), against ~0.1 and
more between restarts."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from study.analyses.das import DasConfig
from study.analyses.das.alignment import cached_maps, make_alignment
from study.analyses.das.loop import Member, train
from study.analyses.das.search import batches, fit, site_data
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


BATCHES = {  # one kind's restarts, and kinds of one k as the search batches them
    "oaf": ("oaf",) * 3, "laf": ("laf",) * 3, "laf_sd": ("laf_sd",) * 3,
    "kinds": ("oaf", "laf_sd", "oaf", "laf_sd"),
}


@pytest.mark.parametrize("model_name", list(SITES))
@pytest.mark.parametrize("batch", list(BATCHES))
def test_members_trained_together_are_the_members_trained_alone(model_name, batch):
    """Same updates per member (the stopping rules fire at different steps: a stopped member
    stays where it stopped while the others go on) and the same alignments (a rotated LAF,
    started at W = I, to the looser DRIFT). The mixed batch holds OAF on the search's
    decaying lr beside the authors' LAF on its own constant lr, as `search` trains them."""
    model, data = _data(model_name)
    width = data.src_train.shape[1]
    budget = dict(steps=30, batch_size=32, stop_iia=1.0, patience=3)
    lrs = {"oaf": (5e-3, 0.05), "laf": (5e-3, 0.05), "laf_sd": (2e-3, 1.0)}

    def members():
        out = []
        for r, name in enumerate(BATCHES[batch]):
            inst = make_alignment(name, width, 2, 10 + r, "rotated")
            inst.fit_standardisation(data.fit_acts)
            out.append(Member(inst, 5 + r, *lrs[name]))
        return out

    alone, together = members(), members()
    n_alone = [train(model, data, [m], **budget)[0] for m in alone]
    n_together = train(model, data, together, **budget)
    assert n_together == n_alone
    assert 0 < min(n_alone) < budget["steps"]  # the plateau rule stopped some member early
    for a, b in zip(alone, together):
        torch.testing.assert_close(interchange_map(b.inst), interchange_map(a.inst),
                                   **(DRIFT if batch == "laf" else TOL))


@pytest.mark.parametrize("model_name", list(SITES))
def test_fit_batched_chooses_and_scores_as_fit_one_by_one(model_name):
    """OAF, both LAFs and the random control at one k, as `search` runs them (every restart
    of every trained kind in one batch, as on a GPU, or each training alone): each kind's
    chosen restart's alignment, each pair's right/wrong on both splits and the restart
    spread."""
    model, data = _data(model_name)
    cfg = replace(DasConfig(), k=(2,), steps=24, batch_size=32, lr=5e-3, restarts=3,
                  patience=4, laf_form="rotated", eval_batch_size=64)
    names = ("oaf", "laf", "laf_sd", "random")
    got = {batched: fit(model, data, names, 2, replace(
        cfg, batch_restarts=batched, batch_kinds="on" if batched else "off"), seed=3)
        for batched in (False, True)}
    for name in names:
        seq, bat = got[False][name], got[True][name]
        torch.testing.assert_close(interchange_map(bat.inst), interchange_map(seq.inst),
                                   **DRIFT)
        for split in ("train", "test"):
            np.testing.assert_array_equal(bat.right[split], seq.right[split])
            np.testing.assert_allclose(bat.restart_sd[split], seq.restart_sd[split],
                                       rtol=1e-6, equal_nan=True)


def test_the_trainings_of_one_k_are_batched_by_restart_and_on_a_gpu_by_kind():
    """`batches`: a kind's restarts together (`batch_restarts`), the kinds together on a GPU
    (`batch_kinds=auto`) or as asked; the random control is never trained."""
    cfg = replace(DasConfig(), restarts=2)
    names = ("oaf", "laf_sd", "random")
    oaf, laf_sd = [("oaf", 0), ("oaf", 1)], [("laf_sd", 0), ("laf_sd", 1)]
    assert batches(names, cfg, "cpu") == [oaf, laf_sd]
    assert batches(names, cfg, "cuda") == [oaf + laf_sd]
    assert batches(names, replace(cfg, batch_kinds="on"), "cpu") == [oaf + laf_sd]
    assert batches(names, replace(cfg, batch_kinds="off"), "cuda") == [oaf, laf_sd]
    alone = replace(cfg, batch_restarts=False)
    assert batches(names, alone, "cpu") == [[t] for t in oaf + laf_sd]
    assert batches(names, alone, "cuda") == [[("oaf", 0), ("laf_sd", 0)],
                                             [("oaf", 1), ("laf_sd", 1)]]
