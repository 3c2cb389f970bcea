"""DAS controls on binding's letter variables, with a planted network whose site at `:` is a
perfect code of the query letter (an input copy: the token just read) and whose readout looks
that letter up in the program: the letter-matched shuffled control scores near 0 on it, where
matching by the answer (the old rule) let it score by construction; the renamed-letters
control says it moves the letter's identity, not its role; and the new `referent` variable
cannot be aligned there (no token at `:` carries it)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from study.analyses.common.stats import chance_iia
from study.analyses.das import DasConfig
from study.analyses.das.alignment import OrthogonalAlignment
from study.analyses.das.controls import (shuffled_sources, transfer_rows, value_keys)
from study.analyses.das.search import pair_right, search, site_data
from study.core.registry import get
from study.models.sites.modules import Sites
from study.tasks.binding import BindingTask
from study.tasks.binding.causal import interpret
from study.tasks.binding.vocab import DIGIT0, LETTER0, VOCAB

LETTERS, WIDTH = 5, 6  # the laptop variant's letters; the site's width


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STUDY_CACHE", str(tmp_path_factory.mktemp("study_cache")))
        entry = get("task", "binding")
        cfg = replace(entry.make_config("small"), n_train=3000, n_val=100, n_test=600,
                      n_gen_per_value=5, n_gen_heldout=50)
        yield BindingTask(cfg)


class LetterCopy(nn.Module):
    """At every position the site resid[0] holds Q [c_x ; 0] with c_x the previous token's
    letter on a circle (x its letter index; zeros for non-letters); the output at each
    position looks that letter up in the program: a perfect 2-dim code of the query letter at
    `:`, computed from nothing but the token just read."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(WIDTH, WIDTH, generator=g))
        angle = 2 * math.pi * torch.arange(LETTERS) / LETTERS
        self.register_buffer("protos", 3 * torch.stack([angle.cos(), angle.sin()], 1))
        self.register_buffer("q", q)
        self.sites = Sites(resid=1)

    def forward(self, ids):  # ids (batch, T)
        letter = ids.roll(1, 1) - LETTER0  # the previous token's letter index
        is_letter = (letter >= 0) & (letter < LETTERS)
        code = self.protos[letter.clamp(0, LETTERS - 1)] * is_letter[..., None]  # (b, T, 2)
        x = torch.cat([code, torch.zeros(*code.shape[:2], WIDTH - 2)], -1) @ self.q.T
        h = self.sites.resid[0](x)  # (batch, T, WIDTH)
        r = h @ self.q[:, :2]  # (batch, T, 2)
        weight = torch.softmax(-4 * ((r[..., None, :] - self.protos) ** 2).sum(-1), -1)
        # padded: a prefix cut before `:` (the source read at a site) still interprets
        padded = np.pad(ids.cpu().numpy(), ((0, 0), (0, 4 * 26 + 3)))
        value = interpret(padded)["value"][:, :LETTERS]  # (batch, letters)
        table = torch.zeros(len(ids), LETTERS, 10)
        rows, cols = np.nonzero(value >= 0)
        table[rows, cols, value[rows, cols]] = 1.0
        digits = torch.log(torch.einsum("btl,bld->btd", weight, table) + 1e-6)  # (b, T, 10)
        logits = torch.full((*ids.shape, len(VOCAB)), -1e4)
        logits[..., DIGIT0:DIGIT0 + 10] = digits
        return logits


def perfect(model) -> OrthogonalAlignment:
    """The OAF whose first 2 dims are exactly the letter code's plane."""
    inst = OrthogonalAlignment(WIDTH, 2)
    with torch.no_grad():
        inst.rotate_layer.weight = model.q
    return inst.eval()


CFG = DasConfig(k=(2,), steps=0, restarts=1, min_changed=20, alignments=("oaf",),
                standardize=False)


def test_the_letter_matched_shuffled_control_scores_near_zero_on_a_perfect_letter_code(task):
    model = LetterCopy().eval()
    train, test = (task.counterfactuals("query", n, split, 0)
                   for n, split in ((400, "train"), (600, "test")))
    data = site_data(model, train, test, "resid", 0, -1, "cpu", outputs=task)
    code = perfect(model)
    tested = data.test.tested.numpy()
    assert tested.mean() > 0.95  # the planted readout answers every base
    assert pair_right(model, data, code, "test").numpy()[tested].mean() >= 0.99
    # matched by the source's letter (the `value` stratum): the code writes another letter
    keys = value_keys(train), value_keys(test)
    assert (keys[1] == test.strata["value"]).all()
    shuffled = shuffled_sources(data, *keys, seed=0, pairs=(train, test), task=task)
    scored = shuffled.test.tested.numpy()
    assert scored.sum() > 0.6 * tested.sum()  # most partners' letters hold another digit
    letter_matched = pair_right(model, shuffled, code, "test").numpy()[scored].mean()
    assert letter_matched <= 0.02
    # matched by the answer instead, a partner may ask the same letter: the same perfect
    # code then scores that share by construction, so that rule is no null
    by_answer = [np.unique(p.cf_labels, axis=0, return_inverse=True)[1].reshape(-1)
                 for p in (train, test)]
    answer_matched = pair_right(model, shuffled_sources(data, *by_answer, seed=0), code,
                                "test").numpy()[tested].mean()
    assert answer_matched >= letter_matched + 0.1
    # the table prints the pair set's chance level, sum of squared answer shares
    rows, _ = search(model, data, "query", -1, CFG, seed=0, checkpoint=0)
    cf = test.cf_labels[tested]
    _, counts = np.unique(cf, axis=0, return_counts=True)
    want = float(((counts / counts.sum()) ** 2).sum())
    assert {r["split"]: r["chance"] for r in rows}["test"] == pytest.approx(want)
    assert 0.1 < want < 0.2  # ten digits, near uniform


def test_the_renamed_letters_control_says_a_letter_copy_moves_identity_not_role(task):
    model = LetterCopy().eval()
    renamed = task.counterfactuals("renamed:query", 400, "test", 0)
    rows = transfer_rows(model, renamed, {("oaf", 2): perfect(model)}, "resid", 0, -1, "cpu",
                         CFG, task, 0, "query")
    (row,) = rows
    assert row["pairs"] == "renamed:query" and row["n_tested"] > 300
    assert row["iia"] >= 0.99 and row["base_kept"] <= 0.01  # identity, every time


def test_a_letter_copy_at_colon_cannot_carry_the_referent(task):
    """The referent pairs keep the query letter, so the site of a network that only copies
    it holds the same vector in base and source: no alignment there can move the answer."""
    model = LetterCopy().eval()
    train, test = (task.counterfactuals("referent", n, split, 0)
                   for n, split in ((200, "train"), (300, "test")))
    data = site_data(model, train, test, "resid", 0, -1, "cpu", outputs=task)
    right = pair_right(model, data, perfect(model), "test").numpy()
    assert right[data.test.tested.numpy()].mean() == 0.0
    assert chance_iia(test.cf_labels, data.test.tested.numpy()) < 0.25
