"""The comparison's answer and position codes on counting, and decode-then-write stitching,
on planted networks: the answer code covers the demo's counting pairs and carries a response
that only the answer decides; the position code carries a demonstration-phase count that is
the position; decode-then-write relates two codes of one value that no affine map relates."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from study.analyses.common.interchange import pair_tensors
from study.analyses.compare import CompareConfig, Subject, compare
from study.claims.shared import pair_verdicts
from study.analyses.compare.codes import MIN_COVERAGE, OneHot, answer_codes, answers, coverage
from study.models.sites.modules import Sites
from study.tasks.base import Examples, Pairs
from study.tasks.counting import CountingConfig, CountingTask
from study.tasks.counting.vocab import ID, VOCAB

VARIABLE = "up_down:count"
D = 16  # state width
N_VALUES, RADIUS = 48, 8.0  # the values a planted state holds, on a ring


def _orthogonal(d, seed):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    return q * torch.sign(torch.diagonal(r))


@pytest.fixture(scope="module")
def demo_task():
    """`study=demo`'s counting task at scale=small: the task's defaults (no small preset)."""
    return CountingTask(CountingConfig())


def test_the_answer_code_covers_the_demo_s_changed_counting_pairs(demo_task):
    """Keyed per scored position relative to the read position, the answer of nearly every
    changed test pair is one the fit has seen (the compare defaults: 1,000 fitting and 500
    test pairs); keyed by every absolute (position, label) at once, almost none is."""
    cfg = CompareConfig()
    fit = pair_tensors(demo_task.counterfactuals(VARIABLE, cfg.n_fit, "train", cfg.seed),
                       "cpu", -1, demo_task)
    test = pair_tensors(demo_task.counterfactuals(VARIABLE, cfg.n_test, "test", cfg.seed),
                        "cpu", -1, demo_task)
    *_, cover = answer_codes(fit, test)
    assert cover >= MIN_COVERAGE
    old = OneHot(answers(fit, relative=False)[0])  # the whole absolute answer as one key
    seen = np.array([key in old.index for key in answers(test, relative=False)[1]])
    assert coverage(seen, test.changed.numpy()) < 0.2


class Counter(nn.Module):
    """A hand-built recurrent network that counts as Grant et al.'s Up-Down program does, its
    state site after token t holding one value v on a ring of radius `RADIUS` in a plane (the
    other coordinates carry the token read): before the trigger v goes up by one at each demo
    token (`clock`: at every token, so v is the position), the trigger keeps it, each
    response token takes one off; the readout after the trigger says R while v > 0, else E.
    Every step decodes v from the state (the nearest ring point), so a write into the plane
    carries on. The phase is read off the tokens, not the state. In the response phase v is
    the number of responses still to give: the state holds only the answer. `rot` turns the
    state: a copy in other coordinates."""

    def __init__(self, clock=False, rot=None):
        super().__init__()
        self.clock = clock
        angle = 2 * math.pi * torch.arange(N_VALUES) / N_VALUES
        self.register_buffer("protos", RADIUS * torch.stack([angle.cos(), angle.sin()], 1))
        g = torch.Generator().manual_seed(5)
        self.register_buffer("nuisance", torch.randn(len(VOCAB), D - 2, generator=g))
        q = _orthogonal(D, 2) @ (torch.eye(D) if rot is None else rot)
        self.register_buffer("basis", q)  # (D, D): state = [ring ; nuisance] @ basis
        self.n_layers, self.n_heads = 1, 0
        self.sites = Sites(state=CountingTask(CountingConfig()).seq_len)
        demo = torch.zeros(len(VOCAB), dtype=torch.bool)
        demo[[ID[t] for t in ("D0", "D1", "D2", "D")]] = True
        self.register_buffer("demo", demo)

    def forward(self, ids, readout=None):  # ids (n, T)
        n, T = ids.shape
        v = torch.zeros(n, dtype=torch.long)
        after = torch.zeros(n, dtype=torch.bool)  # the trigger has been read
        out = []
        for t in range(T):
            tok = ids[:, t]
            after = after | (tok == ID["T"])
            up = (torch.ones_like(after) if self.clock else self.demo[tok]) & ~after & (t > 0)
            down = after & (tok == ID["R"])
            v = (v + up.long() - down.long()).clamp(0, N_VALUES - 1)
            h = torch.cat([self.protos[v], self.nuisance[tok]], 1) @ self.basis  # (n, D)
            h = self.sites.state[t](h)
            ring = (h @ self.basis.T)[:, :2]  # (n, 2)
            v = ((ring[:, None] - self.protos) ** 2).sum(-1).argmin(1)  # (n,) decoded
            say = torch.where(v > 0, ID["R"], ID["E"])
            out.append(torch.where(after, say, torch.full_like(say, ID["D0"])))
        logits = torch.nn.functional.one_hot(torch.stack(out, 1), len(VOCAB)).float() * 10
        return logits if readout is None else logits[readout]  # (n, T, vocab) | (m, vocab)


class PhaseTask(CountingTask):
    """The demo's counting task with only the up_down:count pairs whose base and source
    positions both lie in one phase (0: demonstrations, 1: responses)."""

    def __init__(self, phase):
        super().__init__(CountingConfig())
        self.phase = phase

    def counterfactuals(self, kind, n, split="test", seed=0):
        p = super().counterfactuals(VARIABLE, 5 * n, split, seed)
        both = (p.strata["base_phase"] == self.phase) & (p.strata["source_phase"] == self.phase)
        keep = np.flatnonzero(both)[:n]
        return Pairs(kind, p.base_ids[keep], p.source_ids[keep], p.base_labels[keep],
                     p.cf_labels[keep], p.base_pos[keep], p.source_pos[keep],
                     {k: v[keep] for k, v in p.strata.items()})


def _subject(tmp, name, model, variable=VARIABLE, site="state@pair", k=2):
    """A subject whose saved OAF alignment puts the value's plane in its first two columns."""
    key = f"oaf/{variable}/{site}/k={k}"
    tensors = {key: model.basis.T.clone().contiguous(), key + "/k": torch.tensor(k),
               key + "/mu": torch.zeros(D), key + "/sigma": torch.ones(D)}
    path = tmp / f"{name}.safetensors"
    save_file(tensors, str(path))
    return Subject(name, name, 0, model.eval(), path)


def _own_row(tables, name):
    st = tables["compare_stitching"]
    rows = st[(st["run"] == name) & (st["other_run"] == name)]
    assert len(rows) == 1
    return rows.iloc[0]


@pytest.fixture(scope="module")
def counters(tmp_path_factory):
    """phase -> the comparison tables of the Up-Down counter with itself on pairs of that
    phase, and of the clock counter on demonstration-phase pairs."""
    tmp = tmp_path_factory.mktemp("counters")
    cfg = CompareConfig(n_fit=300, n_test=200, n_geometry=4, n_perm=1)
    cpu = torch.device("cpu")
    return {"response": compare([_subject(tmp, "count", Counter())], PhaseTask(1), cfg, cpu),
            "clock": compare([_subject(tmp, "clock", Counter(clock=True))], PhaseTask(0), cfg,
                             cpu)}


def test_an_answer_only_state_in_the_response_phase_scores_through_the_answer_code(counters):
    r = _own_row(counters["response"], "count")
    assert r["n_tested"] >= 100 and r["own_iia"] > 0.95
    assert r["output_code_coverage"] >= MIN_COVERAGE and "answer code" not in r["code_refusal"]
    assert r["output_code_iia"] >= 0.9
    # the responses still to give are not a function of the position
    assert r["position_code_iia"] < 0.5


def test_a_state_that_holds_only_the_position_scores_through_the_position_code(counters):
    r = _own_row(counters["clock"], "clock")
    assert r["n_tested"] >= 100 and r["own_iia"] > 0.95
    assert r["position_code_coverage"] >= MIN_COVERAGE
    assert r["position_code_iia"] >= 0.9
    assert r["input_code_iia"] < 0.5  # the window holds demo tokens, the same at every count


# ----------------------------------------------------------------------------- decode-then-write

M_VALUES = 8  # values of the planted variable


class Placed(nn.Module):
    """One-token inputs v * 4 + w: the value v at its point `points[v]` in site dims (0, 1),
    the nuisance w in dims 3 on; the readout names the nearest point."""

    def __init__(self, points):
        super().__init__()
        self.register_buffer("points", torch.as_tensor(points, dtype=torch.float32))  # (m, 2)
        g = torch.Generator().manual_seed(6)
        nuisance = torch.zeros(4, D)
        nuisance[:, 3:] = 2 * torch.randn(4, D - 3, generator=g)
        self.register_buffer("nuisance", nuisance)
        self.register_buffer("basis", torch.eye(D))
        self.sites = Sites(resid=1)

    def forward(self, ids, readout=None):  # ids (n, 1)
        protos = torch.cat([self.points, torch.zeros(len(self.points), D - 2)], 1)  # (m, D)
        h = self.sites.resid[0](protos[ids // 4] + self.nuisance[ids % 4])  # (n, 1, D)
        d = ((h[..., None, :2] - self.points) ** 2).sum(-1)  # (n, 1, m)
        return -d if readout is None else -d[readout]


class ValueTask:
    """One-token pairs of the values 0..M_VALUES - 1, each naming its source's value; the
    training pairs draw only the first `trained` values."""

    name, splits, pad_id, output_ids = "values", ("train", "val", "test"), 0, None
    config = SimpleNamespace(held_out=())

    def __init__(self, trained=M_VALUES):
        self.trained = trained

    def counterfactuals(self, kind, n, split="test", seed=0):
        rng = np.random.default_rng([seed, self.splits.index(split)])
        top = self.trained if split == "train" else M_VALUES
        vb, vs = rng.integers(top, size=n), rng.integers(top, size=n)
        base = (vb * 4 + rng.integers(4, size=n))[:, None]
        src = (vs * 4 + rng.integers(4, size=n))[:, None]
        aligned = np.full(n, -1)
        return Pairs(kind, base, src, vb[:, None], vs[:, None], aligned, aligned.copy(),
                     {"value": vs})

    def split(self, name):
        ids = np.arange(4 * M_VALUES)[:, None]
        return Examples(ids, ids // 4)

    def probe_variables(self, ids, labels=None):
        return {}


def test_decode_then_write_relates_two_codes_no_affine_map_relates(tmp_path):
    """A holds the value on a ring in a random order, B on a line: B's own interchange and
    decode-then-write carry every value, the least-squares map between the two cannot."""
    order = np.random.default_rng(3).permutation(M_VALUES)
    angle = 2 * np.pi * order / M_VALUES
    ring = 3 * np.stack([np.cos(angle), np.sin(angle)], 1)
    line = np.stack([3 * np.arange(M_VALUES) - 10.5, np.zeros(M_VALUES)], 1)
    subjects = [_subject(tmp_path, name, Placed(points), variable="v", site="resid[0]@pair")
                for name, points in (("ring", ring), ("line", line))]
    cfg = CompareConfig(n_fit=300, n_test=300, n_geometry=4, n_perm=1)
    st = compare(subjects, ValueTask(), cfg, torch.device("cpu"))["compare_stitching"]
    r = st[(st["run"] == "ring") & (st["other_run"] == "line")].iloc[0]
    assert r["own_iia"] > 0.95
    assert r["decode_iia"] >= r["own_iia"] - 0.05
    assert r["iia"] < r["own_iia"] - 0.3


def test_an_answer_code_that_covers_too_few_changed_pairs_is_refused_not_scored(tmp_path):
    """Fitted on the first six values only, the answer code has no column for a quarter of
    the test answers: its IIA is NaN with the reason, and the verdict it could have decided
    says so."""
    line = np.stack([3 * np.arange(M_VALUES) - 10.5, np.zeros(M_VALUES)], 1)
    subject = _subject(tmp_path, "line", Placed(line), variable="v", site="resid[0]@pair")
    cfg = CompareConfig(n_fit=300, n_test=300, n_geometry=4, n_perm=1)
    tables = compare([subject], ValueTask(trained=6), cfg, torch.device("cpu"))
    tables["compare_stitching"] = pair_verdicts(tables["compare_stitching"])
    r = _own_row(tables, "line")
    assert 0.5 < r["output_code_coverage"] < MIN_COVERAGE
    assert math.isnan(r["output_code_iia"])
    assert r["code_refusal"].startswith("answer code not identifiable")
    assert r["own_iia"] > 0.95 and r["verdict"] == "code not identifiable"
