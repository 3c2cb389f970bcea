"""`study.iia` judges an intervenable as its placement says (`where`): at the token position
`place` set, with the batch size and output ids `judge_with` set (what `Run.intervenable`
sets for a trained alignment), each setting kept when the other changes; the intervenable
stays a plain pyvene object.

The network is hand-built so that each setting changes the score: the output at a position
reads only the site vector at that position (a patch at another position changes nothing
there), and a token no pair uses always has the largest logit (only over the output ids is a
pair's answer right)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

import study
from study.core.labels import IGNORE
from study.core.outputs import Outputs
from study.models.sites.modules import Sites
from study.models.sites.pyvene_bridge import judge_with, place, site_intervenable, where
from study.tasks.base import Pairs

V, DISTRACTOR, L = 6, 5, 4  # tokens, the token every position rates highest, length


class PerPosition(nn.Module):
    """ids (batch, L) -> the site resid[0] (batch, L, V) holds each token one-hot; logits
    (batch, L, V) = 2 at the token read there and 3 at DISTRACTOR."""

    def __init__(self):
        super().__init__()
        self.register_buffer("emb", torch.eye(V))
        self.register_buffer("out", 2 * torch.eye(V) + 3 * torch.eye(V)[DISTRACTOR])
        self.sites = Sites(resid=1)

    def forward(self, ids):
        return self.sites.resid[0](self.emb[ids]) @ self.out


def _pairs(n: int = 40) -> Pairs:
    """Aligned pairs scored at the last position only: the base's token there, and the
    source's (never the same) as the counterfactual answer."""
    rng = np.random.default_rng(0)
    base = rng.integers(DISTRACTOR, size=(n, L))
    source = (base + rng.integers(1, DISTRACTOR, size=(n, L))) % DISTRACTOR
    labels = lambda ids: np.where(np.arange(L) == L - 1, ids, IGNORE)  # noqa: E731
    aligned = np.full(n, -1)
    return Pairs("v", base, source, labels(base), labels(source), aligned, aligned.copy())


def test_iia_judges_an_intervenable_where_its_placement_says():
    from study.models.sites.pyvene_loader import pyvene

    net, pairs = PerPosition().eval(), _pairs()
    iv = site_intervenable(net, "resid", 0)  # a patch of the whole site vector
    assert where(iv).position == -1 and where(iv).outputs is None
    # every token scored: the distractor wins everywhere, no pair tests the patch (IIA 0)
    assert study.iia(iv, pairs) == 0.0
    only = Outputs.of(range(DISTRACTOR), V)  # the pairs' tokens: each position's own wins
    assert judge_with(iv, 7, only) is iv
    assert (where(iv).batch_size, where(iv).outputs) == (7, only)
    assert study.iia(iv, pairs) == 1.0  # at the answer position the source's token is written
    assert place(iv, 0) is iv
    assert where(iv).position == 0 and (where(iv).batch_size, where(iv).outputs) == (7, only)
    assert study.iia(iv, pairs) == 0.0  # the answer position reads its own vector
    place(iv, L - 1)
    assert study.iia(iv, pairs) == 1.0
    assert study.iia(iv, pairs, outputs=only, batch_size=3) == 1.0  # a call's own settings
    judge_with(iv, 1000, None)
    assert where(iv).position == L - 1 and study.iia(iv, pairs) == 0.0
    # the placement is kept beside the intervenable, not on it: a fresh one starts anew
    assert type(iv) is pyvene().IntervenableModel
    assert where(site_intervenable(net, "resid", 0)).position == -1


def test_a_step_intervenables_placement_holds_each_representations_step():
    from tests.models.rnn_nets import smoke_net

    net = smoke_net("gru").eval()
    iv = site_intervenable(net, "state", 0)
    at = where(iv)
    assert at.per_step and at.steps == tuple(range(net.sites.kinds()["state"]))
    t = at.steps_on("cpu")
    assert t.dtype == torch.long and t.tolist() == list(at.steps)
    assert at.steps_on("cpu") is t  # made once per device
    assert where(place(iv, 2)).steps == at.steps
