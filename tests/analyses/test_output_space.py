"""One rule for "is the answer right": the analyses score a task's outputs exactly as training
does, over the task's output ids (`study/core/outputs.py`). assign_add scores its 59 number
logits out of a larger vocabulary, so a logit outside them (one training never trained) can be
the largest; it must not decide a right/wrong anywhere."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from study.analyses.common.data import correct
from study.analyses.common.interchange import all_right, pair_tensors, rows_right
from study.core.labels import IGNORE
from study.core.outputs import Outputs
from study.core.registry import get
from tests.conftest import frozen_smoke_model


def _assign_add():
    entry = get("task", "assign_add")
    return entry.obj(entry.make_config("smoke"))


def _logits_and_labels(task, n=64, seed=0):
    """(n, pos, V) logits and (n, pos) labels with the last position scored; in the odd rows
    a token outside the output ids has the largest logit there, in the even rows an output
    id."""
    V, pos = len(task.vocab), 5
    outside = sorted(set(range(V)) - set(task.output_ids))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, pos, V, generator=g)
    labels = torch.full((n, pos), IGNORE, dtype=torch.long)
    ids = torch.as_tensor(task.output_ids)
    best = ids[logits[:, -1, ids].argmax(-1)]  # (n,) the argmax among the output ids
    wrong = ids[torch.randint(0, len(ids), (n,), generator=g)]
    labels[:, -1] = torch.where(torch.arange(n) % 4 < 2, best, wrong)  # half right
    logits[0::2, -1, outside] = -50.0
    logits[1::2, -1, outside[0]] = 50.0  # a non-output logit wins the whole-vocabulary argmax
    return logits, labels


def test_the_analyses_right_and_wrong_equal_trainings_where_a_non_output_logit_is_the_argmax():
    task = _assign_add()
    assert set(task.output_ids) < set(range(len(task.vocab)))  # a strict subset
    logits, labels = _logits_and_labels(task)
    training = Outputs.of(task.output_ids, len(task.vocab), torch.device("cpu"))  # the engine's
    want = training.right(logits, labels)  # (n,)
    outputs = Outputs.of_task(task, "cpu")  # the analyses'
    assert torch.equal(all_right(logits, labels, outputs), want)  # patching's flips
    scored = labels != IGNORE
    rows = scored.nonzero()[:, 0]
    assert torch.equal(rows_right(logits[scored], labels[scored], rows, len(labels), outputs),
                       want)  # DAS's and stitching's IIA
    assert np.array_equal(correct(logits.numpy(), labels.numpy(), task.output_ids),
                          want.numpy())  # head ablation's accuracy
    # the case is exercised: the whole-vocabulary argmax calls right rows wrong
    whole = ((logits.argmax(-1) == labels) | ~scored).all(1)
    assert want[1::2].any() and not whole[1::2].any()
    assert torch.equal(whole[0::2], want[0::2])  # where an output id wins, nothing changes


def test_the_das_loss_is_trainings_loss_and_trains_no_logit_outside_the_output_ids():
    task = _assign_add()
    logits, labels = _logits_and_labels(task)
    scored = labels != IGNORE
    m_logits = logits[scored].requires_grad_(True)  # (m, V) the scored positions, as DAS
    loss = Outputs.of_task(task, "cpu").loss(m_logits, labels[scored])
    training = Outputs.of(task.output_ids, len(task.vocab), torch.device("cpu"))
    want = F.cross_entropy(training.logits(logits[scored]), training.targets(labels[scored]),
                           ignore_index=IGNORE)  # the engine's loss
    torch.testing.assert_close(loss, want)
    loss.backward()
    outside = sorted(set(range(len(task.vocab))) - set(task.output_ids))
    assert m_logits.grad[:, outside].abs().max() == 0
    assert m_logits.grad[:, list(task.output_ids)].abs().max() > 0


def test_a_task_scoring_every_token_keeps_the_whole_vocabulary_argmax():
    assert Outputs.of(range(6), 6).whole and Outputs.of(range(6), 6, "cpu").columns is None
    logits = torch.randn(3, 2, 6)
    labels = logits.argmax(-1)
    assert all_right(logits, labels, Outputs()).all()
    with pytest.raises(ValueError, match="token ids in 0..5"):
        Outputs.of([0, 6], 6)


class _Constant(nn.Module):
    """Runs the network it wraps (so its sites see real activations) but answers the same
    everywhere: token `answer` (an output id) leads the output ids, and token `outside` (not
    one) has the largest logit of all. Over the output ids it answers `answer`."""

    def __init__(self, inner, answer: int, outside: int):
        super().__init__()
        self.inner = inner
        self.sites, self.capabilities = inner.sites, inner.capabilities
        self.n_layers, self.n_heads = inner.n_layers, inner.n_heads
        self.bias = nn.Parameter(torch.zeros(inner.W_U.shape[-1]), requires_grad=False)
        self.bias.data[answer], self.bias.data[outside] = 10.0, 100.0

    def site_kinds(self):
        return self.inner.site_kinds()

    def forward(self, ids, readout=None):
        out = self.inner(ids) if readout is None else self.inner(ids, readout=readout)
        return 0 * out + self.bias


@torch.no_grad()
def test_patching_das_stitching_and_ablation_score_over_the_output_ids():
    """Every analysis's scoring on a network that answers one output id, its largest logit
    outside them: right exactly where the expected answer is that id (whole-vocabulary
    scoring would call every answer wrong)."""
    from study.analyses.circuits.ablation import accuracy_mask
    from study.analyses.common.data import sample
    from study.analyses.compare.paired import SiteRef
    from study.analyses.compare.projection import Subspace
    from study.analyses.compare.stitch import interchange_right
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.search import pair_right, site_data
    from study.analyses.patching.sweep import sweep

    task, model, _ = frozen_smoke_model("assign_add", "attn2")
    outside = sorted(set(range(len(task.vocab))) - set(task.output_ids))[0]
    pairs = task.counterfactuals("x", 32, split="test", seed=0)
    answer = int(pairs.cf_labels[0, -1])  # pair 0's counterfactual answer (a number)
    net = _Constant(model, answer, outside)
    want = torch.as_tensor(pairs.cf_labels[:, -1] == answer)  # (n,) assign_add scores the end
    assert 0 < int(want.sum()) < len(want)

    pt = pair_tensors(pairs, "cpu", outputs=task)  # patching
    assert pt.outputs.columns.tolist() == list(task.output_ids)
    _, ref = sweep(net, pt, [("resid", 1)], model.n_heads, 64)
    assert ref["base"][0] == int(want.sum())  # flips of the unpatched bases

    data = site_data(net, pairs, pairs, "resid", 1, -1, "cpu", outputs=task)  # DAS
    inst = make_alignment("oaf", data.src_train.shape[1], 2, 0, "rotated")
    assert torch.equal(pair_right(net, data, inst, "test"), want)

    width = data.src_train.shape[1]  # stitching (compare)
    space = Subspace.from_matrix(torch.eye(width), 2)
    z = space.read(data.src_test)
    assert torch.equal(torch.as_tensor(interchange_right(net, SiteRef("resid", 1), space, pt, z)),
                       want)

    ids, labels, _ = sample(task, "test", 200, 0)  # head ablation's accuracy (circuits)
    scored = labels != IGNORE
    assert scored[:, -1].all() and not scored[:, :-1].any()  # one answer, at the end
    got = accuracy_mask(net, task, ids, labels, "cpu")
    assert got.any() and np.array_equal(got, labels[:, -1] == answer)
