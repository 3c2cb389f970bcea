"""Identifiability before any verdict: pairs that cannot tell a variable from the input at the
site or from the answer give "confounded", whatever the network computes, and pairs that can
still let a planted network that computes the variable be called aligned."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from study.analyses.common.identify import confounds
from study.analyses.das import DasConfig
from study.analyses.das.search import search, site_data
from study.claims.aligned import verdict_numbers
from study.claims.runs import RunTables
from study.tasks.binding import BindingConfig, BindingTask
from study.tasks.base import Pairs
from tests.analyses.test_compare_controls import (ANSWER_AT, D, LENGTH, SECOND, VOCAB, Pointer,
                                                  PointerTask, _labels, _programs, referent)


class LabelledPointer(PointerTask):
    """The two-hop programs, whose labels the task can give for any sequence. One more pair
    kind, `referent_x`: the source is another program, and the counterfactual is the base's
    own digit of the letter the source's query names (the source's answer only where the two
    digit tables agree): pairs that separate the referent from the answer."""

    def labels_of(self, ids):
        return _labels(np.asarray(ids))

    def counterfactuals(self, kind, n, split="test", seed=0):
        if kind != "referent_x":
            return super().counterfactuals(kind, n, split, seed)
        rng = np.random.default_rng([seed, self.splits.index(split), 99])
        base, src = _programs(rng, n), _programs(rng, n)
        cf = _labels(base)
        cf[:, ANSWER_AT] = base[np.arange(n), 4 + referent(src) - SECOND[0]]
        aligned = np.full(n, -1)
        return Pairs(kind, base, src, _labels(base), cf, aligned, aligned.copy())


class SoftPointer(Pointer):
    """`Pointer` with a differentiable readout, so that DAS can be trained on it: each value on
    the ring is weighted by its closeness to the decoded point (a softmax), then finished into
    an answer as `Pointer` finishes the nearest one."""

    def forward(self, ids, readout=None):  # ids (n, T)
        n, T = ids.shape
        if T < LENGTH:  # a probe of the site's width: no program to read
            return Pointer.forward(self, ids, readout)
        ring = torch.zeros(n, T, 2)
        which = (self._variable(ids)[:, None] == self.values).float().argmax(1)  # (n,)
        ring[:, ANSWER_AT] = self.protos[which]
        h = torch.cat([ring, self.nuisance[ids[:, :1]].expand(n, T, D - 2)], -1) @ self.basis
        h = self.sites.resid[0](h)  # (n, T, D)
        read = (h @ self.basis.T)[..., :2]  # (n, T, 2)
        w = torch.softmax(-4 * ((read[..., None, :] - self.protos) ** 2).sum(-1), -1)  # (n,T,m)
        p = torch.zeros(n, T, VOCAB)
        for j, v in enumerate(self.values):
            value = torch.full_like(ids, int(v))
            out = value if self.holds == "answer" else self._finish(ids, value)  # (n, T)
            p = p.scatter_add(2, out[..., None], w[..., j:j + 1])
        logits = torch.log(p + 1e-6)  # (n, T, VOCAB)
        return logits if readout is None else logits[readout]


def _colon(task, pairs):
    return np.argmax(np.asarray(pairs.base_ids) == task.encode([":"])[0], axis=1)


@pytest.fixture(scope="module")
def binding():
    return BindingTask(BindingConfig(n_train=2000, n_val=100, n_test=1000))


@pytest.mark.parametrize("kind,input_share,answer_share", [
    ("root_value", 0.0, 1.0), ("referent", 0.0, 1.0), ("query", 1.0, 1.0)])
def test_binding_one_token_pairs_at_the_colon_cannot_tell_a_variable_from_the_answer(
        binding, kind, input_share, answer_share):
    """Every one-token pair's counterfactual label is the source's own answer, so a network
    holding only the answer at ':' would score on every pair; the query letter is the token
    just read, so the query's pairs are the input too."""
    pairs = binding.counterfactuals(kind, 300, "test")
    at = _colon(binding, pairs)
    c = confounds(binding, pairs.base_ids, pairs.source_ids, pairs.cf_labels,
                  pairs.base_labels, at, at)
    assert c.input == pytest.approx(input_share) and c.answer == pytest.approx(answer_share)


def test_before_the_query_is_read_no_site_holds_the_answer(binding):
    """Two tokens before '#' (a line's right-hand token) the answer is not decided yet: the
    answer code predicts nothing there, and the query letter is not in the window."""
    pairs = binding.counterfactuals("root_value", 300, "test")
    at = _colon(binding, pairs) - 3
    c = confounds(binding, pairs.base_ids, pairs.source_ids, pairs.cf_labels,
                  pairs.base_labels, at, at)
    assert c.answer == 0.0 and c.input == 0.0


def test_a_pair_sets_shares_are_computed_once_and_are_its_own(binding, monkeypatch):
    """The das analysis reads one pair set at every site (`ConfoundShares`): the shares given
    are those `pair_confounds` gives the pairs read, computed once for a set read again (its
    tensors made afresh, as at the next site), and another tested subset or another pair set
    gets its own."""
    from dataclasses import replace

    from study.analyses.common.identify import ConfoundShares, pair_confounds
    from study.analyses.common.interchange import pair_tensors

    calls = []
    labels_of = type(binding).labels_of
    monkeypatch.setattr(binding, "labels_of",
                        lambda ids: calls.append(len(ids)) or labels_of(binding, ids))

    def tensors(pairs, keep=None):  # judged as if the network tested every changed pair
        pt = pair_tensors(pairs, "cpu", -1, binding)
        return replace(pt, tests=pt.changed if keep is None else pt.changed & keep)

    def same(a, b):
        np.testing.assert_equal((a.input, a.answer), (b.input, b.answer))

    shares = ConfoundShares()
    pairs = binding.counterfactuals("root_value", 300, "test")
    first = shares.of(binding, pairs, tensors(pairs))
    same(first, pair_confounds(binding, tensors(pairs)))
    n = len(calls)
    assert n > 0
    same(shares.of(binding, pairs, tensors(pairs)), first)
    assert len(calls) == n  # read again: not recomputed
    half = torch.arange(len(pairs)) % 2 == 0  # (n,) another tested subset of the same pairs
    same(shares.of(binding, pairs, tensors(pairs, half)),
         pair_confounds(binding, tensors(pairs, half)))
    other = binding.counterfactuals("query", 300, "test")
    same(shares.of(binding, other, tensors(other)), pair_confounds(binding, tensors(other)))
    assert len(calls) == 3 * n  # each new set once by the shares, once by the direct call


def test_the_task_labels_any_sequence_as_its_splits_label_them(binding):
    ex = binding.split("test")
    assert (binding.labels_of(ex.ids) == np.asarray(ex.labels)).all()


def _das_run(holds: str, kind: str, tmp_path) -> RunTables:
    """A run directory's tables for the planted network holding `holds`, searched with DAS
    (OAF, its random and shuffled controls) at ':' on pairs of `kind`."""
    task, model = LabelledPointer(), SoftPointer(holds).eval()
    train, test = task.counterfactuals(kind, 400, "train"), task.counterfactuals(kind, 300)
    data = site_data(model, train, test, "resid", 0, ANSWER_AT, "cpu", outputs=task)
    cfg = DasConfig(k=(2,), steps=300, batch_size=64, lr=5e-2, restarts=1,
                    alignments=("oaf", "random"))
    rows, _ = search(model, data, holds, ANSWER_AT, cfg, seed=0, checkpoint=1)
    das = pd.DataFrame(rows)
    shuffled = das[das["alignment"] == "oaf"].assign(iia=0.2)  # a control that the IIA clears
    return RunTables(path=tmp_path, config={"model": "pointer", "seed": 0}, summary={},
                     status="done", metrics=None, heuristics=None, label="pointer s0",
                     tables={"das": das, "das_shuffled": shuffled})


def test_a_planted_answer_subspace_on_pairs_that_cannot_tell_is_confounded(tmp_path):
    """A subspace holding only the answer is found by DAS as well as a computed variable
    would be; on pairs whose label is the source's answer the verdict says so instead of
    "aligned"."""
    (row,) = verdict_numbers([_das_run("answer", "value", tmp_path)]).to_dict("records")
    assert row["iia"] >= 0.9  # DAS finds the subspace ...
    assert row["confound_answer"] == 1.0
    assert row["verdict"] == "confounded with the answer"  # ... and the pairs cannot say


def test_on_pairs_that_separate_them_the_answer_subspace_is_not_aligned(tmp_path):
    """The control can fail: on pairs whose label is the base's digit of the source's
    referent (the source's answer only where the two programs' digits agree), the pairs are
    not confounded, and a network holding only the answer is not aligned: DAS writes the
    source's answer, which these pairs do not ask for."""
    run = _das_run("answer", "referent_x", tmp_path)
    das = run.tables["das"]
    assert das["confound_answer"].max() < 0.5 and das["confound_input"].max() < 0.5
    (row,) = verdict_numbers([run]).to_dict("records")
    assert row["verdict"] == "not aligned", row


def test_a_planted_code_s_share_counts_among_the_controls():
    from study.claims.rules import verdict
    assert verdict(0.97, 0.94, 0.2, 0.2, float("nan"), 0.05, 0.0) == "aligned"
    assert verdict(0.97, 0.94, 0.2, 0.2, float("nan"), 0.88, 0.0) == "not aligned"
    assert verdict(0.97, 0.94, 0.2, 0.2, float("nan"), 0.95, 0.0) == "confounded with the input"
    assert verdict(0.97, 0.94, 0.2, 0.2) == "aligned"  # tables without the shares: unchecked


class LabelledRenamed(LabelledPointer):
    """The variable named after what each network holds; `separating`: the referent's pairs
    are `referent_x`, which separate it from the answer."""

    def __init__(self, separating: bool):
        self.kinds = {"query": "query", "answer": "value",
                      "referent": "referent_x" if separating else "referent"}

    def counterfactuals(self, kind, n, split="test", seed=0):
        return super().counterfactuals(self.kinds[kind], n, split, seed)


def _shared_verdict(holds, task, tmp_path) -> dict:
    """The stitching row of two rotated copies of a planted network holding `holds`, with
    its verdict (`study.claims.shared.pair_verdicts`)."""
    import torch
    from study.analyses.compare import CompareConfig, compare
    from study.claims.shared import pair_verdicts
    from tests.analyses.test_compare_controls import _orthogonal, _subject
    subjects = [_subject(tmp_path, f"{holds}_a", Pointer(holds)),
                _subject(tmp_path, f"{holds}_b", Pointer(holds, rot=_orthogonal(D, 9)),
                         in_plane=0.6)]
    cfg = CompareConfig(n_fit=300, n_test=300, n_geometry=8, n_perm=1)
    st = pair_verdicts(compare(subjects, task, cfg, torch.device("cpu"))["compare_stitching"])
    (row,) = st[(st["run"] == f"{holds}_a") & (st["other_run"] == f"{holds}_b")].to_dict(
        "records")
    return row


@pytest.mark.parametrize("holds,separating,said", [
    ("query", False, "confounded with the input and the answer"),
    ("referent", False, "confounded with the answer"),
    ("referent", True, "computation"),
])
def test_two_networks_sharing_a_variable_are_judged_only_where_the_pairs_can_tell(
        holds, separating, said, tmp_path):
    """Two networks that resolve the referent stitch into each other on every pair set; on
    the one-token pairs at ':' (label: the source's answer) no verdict can say more than
    "confounded", and on pairs that separate the referent from the answer the same networks
    share a computation."""
    row = _shared_verdict(holds, LabelledRenamed(separating), tmp_path)
    assert row["iia"] > 0.9 and row["own_iia"] > 0.9
    assert row["verdict"] == said, row
