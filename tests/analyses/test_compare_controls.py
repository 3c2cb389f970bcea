"""The comparison's controls on planted networks: a pair of networks that only copy the token
read before the site is called "input copy", a pair that only carries the answer to the
readout "output code", a pair that resolves the referent from two lines "computation";
`compare.k=auto` reads each run at the smallest k its own validation pairs hold the variable
at."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from study.analyses.compare import CompareConfig, Subject, compare
from study.analyses.compare.choice import auto_k, matched_k
from study.claims.rules import classify
from study.claims.shared import pair_verdicts
from study.core.labels import IGNORE
from study.models.sites.modules import Sites
from study.tasks.base import Examples, Pairs

# Two-hop programs, ten tokens: "a0 r0 a1 r1 | d(4) d(5) d(6) d(7) | q :". Lines a0 -> r0 and
# a1 -> r1 name a letter of the second group, whose digit stands at a fixed place; the query q
# is a0 or a1; the answer (read out at ':') is the digit of the letter q's line names.
FIRST, SECOND = np.arange(4), np.arange(4, 8)  # letter ids of the two groups
DIGIT0, N_DIGITS, COLON = 8, 5, 13
VOCAB, LENGTH, ANSWER_AT = 14, 10, 9
D = 16  # site width


def _programs(rng, n):
    ids = np.zeros((n, LENGTH), np.int64)
    for i in range(n):
        a = rng.choice(FIRST, 2, replace=False)
        r = rng.choice(SECOND, 2, replace=False)
        ids[i, :4] = a[0], r[0], a[1], r[1]
        ids[i, 4:8] = DIGIT0 + rng.choice(N_DIGITS, 4, replace=False)  # distinct digits
        ids[i, 8], ids[i, 9] = a[rng.integers(2)], COLON
    return ids


def referent(ids):  # (n, LENGTH) -> (n,) the letter the query's line names
    return np.where(ids[:, 8] == ids[:, 0], ids[:, 1], ids[:, 3])


def answer(ids):  # (n,) the digit token of the referent
    return ids[np.arange(len(ids)), 4 + referent(ids) - SECOND[0]]


def _labels(ids):
    labels = np.full(ids.shape, IGNORE, np.int64)
    labels[:, ANSWER_AT] = answer(ids)
    return labels


class PointerTask:
    """The two-hop programs as a task. Pair kinds: `query` (q becomes the other line's letter:
    the token before ':' changes), `referent` (the right-hand letter of q's line changes: q
    stays, the answer follows), `value` (the digit of the referent changes: only the answer
    follows)."""

    name, splits, pad_id, output_ids = "pointer", ("train", "val", "test"), 0, None
    config = SimpleNamespace(held_out=())

    def counterfactuals(self, kind, n, split="test", seed=0):
        rng = np.random.default_rng([seed, self.splits.index(split), len(kind)])
        base = _programs(rng, n)
        src = base.copy()
        rows = np.arange(n)
        if kind == "query":
            src[:, 8] = np.where(base[:, 8] == base[:, 0], base[:, 2], base[:, 0])
        elif kind == "referent":
            line = np.where(base[:, 8] == base[:, 0], 1, 3)
            for i in rows:
                src[i, line[i]] = rng.choice([r for r in SECOND if r != base[i, line[i]]])
        else:
            at = 4 + referent(base) - SECOND[0]
            for i in rows:
                src[i, at[i]] = DIGIT0 + rng.choice([d for d in range(N_DIGITS)
                                                     if DIGIT0 + d != base[i, at[i]]])
        aligned = np.full(n, -1)
        return Pairs(kind, base, src, _labels(base), _labels(src), aligned, aligned.copy())

    def split(self, name):
        ids = _programs(np.random.default_rng(self.splits.index(name)), 64)
        return Examples(ids, _labels(ids))

    def probe_variables(self, ids, labels=None):
        return {}


def _orthogonal(d, seed):
    q, r = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    return q * torch.sign(torch.diagonal(r))


class Pointer(nn.Module):
    """A network that answers every program right and holds one variable, on a ring of
    radius 3 in a plane of its site `resid[0]` at ':' (the other coordinates carry the first
    line's letter): `holds` = "query" (a copy of the token read before ':'), "referent" (the
    letter q's line names, found from two lines) or "answer" (the digit about to be read
    out). The readout decodes the nearest value on the ring and finishes the lookup from the
    input tokens (an undecodable value answers ':'). `rot` turns the whole site: a copy of the
    network in other coordinates."""

    VALUES = {"query": FIRST, "referent": SECOND, "answer": DIGIT0 + np.arange(N_DIGITS)}

    def __init__(self, holds, rot=None):
        super().__init__()
        self.holds = holds
        values = torch.as_tensor(self.VALUES[holds])
        angle = 2 * math.pi * torch.arange(len(values)) / len(values)
        self.register_buffer("values", values)
        self.register_buffer("protos", 3 * torch.stack([angle.cos(), angle.sin()], 1))  # (m, 2)
        g = torch.Generator().manual_seed(3)
        self.register_buffer("nuisance", 2 * torch.randn(VOCAB, D - 2, generator=g))
        q = _orthogonal(D, 1) @ (torch.eye(D) if rot is None else rot)
        self.register_buffer("basis", q)  # (D, D): site = [ring ; nuisance] @ basis
        self.sites = Sites(resid=1)

    def _variable(self, ids):  # (n, T) -> (n,) token id of the held value
        ids_np = ids.cpu().numpy()
        got = {"query": lambda: ids_np[:, 8], "referent": lambda: referent(ids_np),
               "answer": lambda: answer(ids_np)}[self.holds]()
        return torch.as_tensor(got, device=ids.device)

    def forward(self, ids, readout=None):  # ids (n, T)
        n, T = ids.shape
        ring = torch.zeros(n, T, 2)
        if T > ANSWER_AT:
            which = (self._variable(ids)[:, None] == self.values).float().argmax(1)  # (n,)
            ring[:, ANSWER_AT] = self.protos[which]
        h = torch.cat([ring, self.nuisance[ids[:, :1]].expand(n, T, D - 2)], -1) @ self.basis
        h = self.sites.resid[0](h)  # (n, T, D)
        read = (h @ self.basis.T)[..., :2]  # (n, T, 2)
        d = ((read[..., None, :] - self.protos) ** 2).sum(-1)  # (n, T, m)
        value = self.values[d.argmin(-1)]  # (n, T) the decoded token id
        if T < LENGTH:  # a probe of the site's width: no program to look up in
            value = torch.full_like(ids, COLON)
        out = value if self.holds == "answer" or T < LENGTH else self._finish(ids, value)
        logits = torch.nn.functional.one_hot(out, VOCAB).float() * 10  # (n, T, VOCAB)
        return logits if readout is None else logits[readout]  # (m, VOCAB) where scored

    def _finish(self, ids, value):  # the lookup after the decoded letter
        ref = value
        if self.holds == "query":  # letter -> its line's right-hand letter
            ref = torch.where(value == ids[:, :1], ids[:, 1:2],
                              torch.where(value == ids[:, 2:3], ids[:, 3:4], -1))
        digit = torch.gather(ids[:, 4:8], 1, (ref - SECOND[0]).clamp(0, 3))
        return torch.where((ref >= SECOND[0]) & (ref <= SECOND[-1]), digit, COLON)


def _subject(tmp, name, model, ks=(2,), in_plane=0.0):
    """A subject whose saved OAF alignment spans the ring plane in its first two columns
    (turned by `in_plane` radians inside it, as another training would leave it)."""
    R = model.basis.T.clone()  # (D, D): site -> [ring ; nuisance]
    c, s = math.cos(in_plane), math.sin(in_plane)
    R[:, :2] = R[:, :2] @ torch.tensor([[c, -s], [s, c]])
    tensors = {}
    for k in ks:
        key = f"oaf/{model.holds}/resid[0]@pair/k={k}"
        tensors.update({key: R.clone().contiguous(), key + "/k": torch.tensor(k),
                        key + "/mu": torch.zeros(D), key + "/sigma": torch.ones(D)})
    path = tmp / f"{name}.safetensors"
    save_file(tensors, str(path))
    return Subject(name, name, 0, model.eval(), path)


class Renamed(PointerTask):
    """The variable named after what each network holds: pairs of the kind that moves it."""

    KIND = {"query": "query", "referent": "referent", "answer": "value"}

    def counterfactuals(self, kind, n, split="test", seed=0):
        return super().counterfactuals(self.KIND[kind], n, split, seed)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """holds -> the stitching table of two rotated copies of a network holding it."""
    tmp = tmp_path_factory.mktemp("controls")
    cfg = CompareConfig(n_fit=300, n_test=300, n_geometry=8, n_perm=1)
    out = {}
    for holds in ("query", "answer", "referent"):
        subjects = [_subject(tmp, f"{holds}_a", Pointer(holds)),
                    _subject(tmp, f"{holds}_b", Pointer(holds, rot=_orthogonal(D, 9)),
                             in_plane=0.6)]
        out[holds] = compare(subjects, Renamed(), cfg, torch.device("cpu"))
    return out


def _pair(tables, holds):
    st = pair_verdicts(tables["compare_stitching"])
    rows = st[(st["run"] == f"{holds}_a") & (st["other_run"] == f"{holds}_b")]
    assert len(rows) == 1
    return rows.iloc[0]


def test_networks_that_copy_the_token_before_the_site_are_an_input_copy(planted):
    r = _pair(planted["query"], "query")
    assert r["own_iia"] > 0.95 and r["iia"] > 0.95  # they do stitch ...
    assert r["window_changed"] == 1.0  # ... the pair changes the token just read
    assert r["input_code_iia"] > 0.95 and r["output_code_iia"] < 0.6
    assert r["verdict"] == "input copy"


def test_networks_that_carry_the_answer_to_the_readout_are_an_output_code(planted):
    r = _pair(planted["answer"], "answer")
    assert r["own_iia"] > 0.95 and r["iia"] > 0.95
    assert r["window_changed"] == 0.0  # the digit changes far from ':'
    assert r["output_code_iia"] > 0.95 and r["input_code_iia"] < 0.6
    assert r["verdict"] == "output code"


def test_networks_that_resolve_the_referent_from_two_lines_share_a_computation(planted):
    r = _pair(planted["referent"], "referent")
    assert r["own_iia"] > 0.95 and r["iia"] > 0.95
    assert r["input_code_iia"] < 0.6 and r["output_code_iia"] < 0.6
    assert r["chance_iia"] < 0.5  # another pair's referent rarely is this one's
    assert r["verdict"] == "computation"
    sim = planted["referent"]["compare_similarity"]
    cka = sim[(sim["run"] == "referent_a") & (sim["other_run"] == "referent_b")
              & (sim["measure"] == "cka")].iloc[0]
    assert cka["value"] > 0.99 and cka["input_code"] < cka["value"] - 0.3


def test_the_shuffled_map_is_not_a_null_and_the_chance_level_is(planted):
    """Fitted on permuted rows, the map's slope is small but not zero; the copier's argmax
    readout reads the direction of the write, so the map carries the letter anyway. The chance
    level (B's own subspace written with other pairs' sources) stays near one in four."""
    r = _pair(planted["query"], "query")
    assert r["shuffled_map_iia"] > r["chance_iia"] + 0.3
    assert 0.1 < r["chance_iia"] < 0.4


# ----------------------------------------------------------------------------- the rules

def test_auto_k_is_the_smallest_k_that_reaches_the_bar_else_the_best():
    assert auto_k({1: 0.4, 2: 0.92, 4: 0.99}, 0.9) == (2, True)
    assert auto_k({1: 0.4, 2: 0.7, 4: 0.7, 8: 0.6}, 0.9) == (2, False)
    assert auto_k({2: float("nan"), 4: 0.95}, 0.9) == (4, True)
    assert matched_k(2, 8) == matched_k(8, 2) == 8


@pytest.mark.parametrize("scores,captured,verdict", [
    ((0.95, 0.95, 0.30, 0.25), True, "input copy"),
    ((0.95, 0.30, 0.93, 0.25), True, "output code"),
    ((0.95, 0.80, 0.84, 0.25), True, "computation"),
    ((0.95, 0.86, 0.30, 0.25), True, "input copy"),  # within the margin of the input code
    ((0.30, 0.10, 0.10, 0.25), True, "not shared"),
    ((0.95, 0.10, 0.10, 0.25), False, "not captured"),
])
def test_a_result_is_computation_only_where_it_clears_both_codes_by_the_margin(
        scores, captured, verdict):
    assert classify(*scores, captured=captured, margin=0.1) == verdict


@pytest.mark.parametrize("own,verdict", [
    (0.97, "partial computation"),  # 0.32 of a receiver that holds it at 0.97
    (0.40, "computation"),  # within the margin of what the receiver's own subspace does
    (float("nan"), "computation"),  # no own IIA: no shortfall to name
])
def test_stitching_far_short_of_the_receivers_own_interchange_is_partial(own, verdict):
    """Clearing both codes says something beyond the input and the answer is shared; reaching
    only a third of what the receiver's own subspace does says it is not all of it."""
    assert classify(0.32, 0.1, 0.1, 0.05, captured=True, margin=0.1, own_iia=own) == verdict


# ----------------------------------------------------------------------------- k = auto

class Spread(nn.Module):
    """One-token inputs v * 4 + w: the value v sits on a ring in site dims (0, 1) for v < 4
    and on dim 2 for v = 4, which only test pairs draw; the readout names the nearest. A
    subspace needs k = 2 for the validation pairs and k = 3 for the test pairs."""

    holds = "v"

    def __init__(self, first_dims=()):
        super().__init__()
        angle = 2 * math.pi * torch.arange(4) / 4
        protos = torch.zeros(5, D)
        protos[:4, 0], protos[:4, 1], protos[4, 2] = 3 * angle.cos(), 3 * angle.sin(), 3.0
        self.register_buffer("protos", protos)  # (5, D)
        g = torch.Generator().manual_seed(4)
        nuisance = torch.zeros(4, D)
        nuisance[:, 3:] = 2 * torch.randn(4, D - 3, generator=g)
        self.register_buffer("nuisance", nuisance)
        order = list(first_dims) + [d for d in range(D) if d not in first_dims]
        self.register_buffer("basis", torch.eye(D)[:, order])  # alignment columns
        self.sites = Sites(resid=1)

    def forward(self, ids, readout=None):  # ids (n, 1)
        h = self.sites.resid[0](self.protos[ids // 4] + self.nuisance[ids % 4])  # (n, 1, D)
        d = ((h[..., None, :3] - self.protos[:, :3]) ** 2).sum(-1)  # (n, 1, 5)
        return -d if readout is None else -d[readout]


class SpreadTask:
    name, splits, pad_id, output_ids = "spread", ("train", "val", "test"), 0, None
    config = SimpleNamespace(held_out=())

    def counterfactuals(self, kind, n, split="test", seed=0):
        rng = np.random.default_rng([seed, self.splits.index(split)])
        top = 5 if split == "test" else 4
        vb, vs = rng.integers(top, size=n), rng.integers(top, size=n)
        base = (vb * 4 + rng.integers(4, size=n))[:, None]
        src = (vs * 4 + rng.integers(4, size=n))[:, None]
        aligned = np.full(n, -1)
        return Pairs(kind, base, src, vb[:, None], vs[:, None], aligned, aligned.copy())

    def split(self, name):
        ids = np.arange(16)[:, None]
        return Examples(ids, ids // 4)

    def probe_variables(self, ids, labels=None):
        return {}


def test_k_auto_reads_each_run_at_the_smallest_k_its_validation_pairs_hold(tmp_path):
    """`a` holds the validation values at k = 2 (its test pairs would need 3); `b`'s
    alignment puts a nuisance dimension first, so it needs k = 3. The pair is compared at 3."""
    def subject(name, model):
        R = model.basis
        tensors = {}
        for k in (1, 2, 3):
            key = f"oaf/v/resid[0]@pair/k={k}"
            tensors.update({key: R.clone().contiguous(), key + "/k": torch.tensor(k)})
        save_file(tensors, str(tmp_path / f"{name}.st"))
        return Subject(name, name, 0, model.eval(), tmp_path / f"{name}.st")

    subjects = [subject("a", Spread((0, 1, 2))), subject("b", Spread((5, 0, 1, 2)))]
    cfg = CompareConfig(n_fit=200, n_test=300, n_geometry=8, n_perm=1)
    st = compare(subjects, SpreadTask(), cfg, torch.device("cpu"))["compare_stitching"]
    mine = st[(st["run"] == "a") & (st["other_run"] == "a")].set_index("k")
    assert mine.loc[1, "other_val_iia"] < 0.9 <= mine.loc[2, "other_val_iia"]
    assert mine.loc[2, "own_iia"] < 0.9  # chosen on test pairs, k would be 3
    ab = st[(st["run"] == "a") & (st["other_run"] == "b")]
    assert set(ab["auto_k"]) == {2} and set(ab["other_auto_k"]) == {3}
    assert set(ab["matched_k"]) == {3} and set(ab["k"]) == {1, 2, 3}  # every k kept
    theirs = st[(st["run"] == "b") & (st["other_run"] == "b")].set_index("k")
    assert theirs.loc[2, "other_val_iia"] < 0.9 <= theirs.loc[3, "other_val_iia"]


def test_the_new_settings_are_parsed_and_checked_on_the_command_line():
    from study.run.compare import compare_config
    from study.core.errors import UsageError
    assert compare_config({}).k == "auto"
    assert compare_config({"compare.k": "auto"}).k == "auto"
    assert compare_config({"compare.k": "4,8"}).k == (4, 8)
    for key, bad, match in (("compare.k", "0", "auto or integers"),
                            ("compare.k", "four", "auto or comma-separated ints"),
                            ("compare.k_bar", "1.5", "in \\(0, 1\\]"),
                            ("compare.margin", "-0.1", "in \\[0, 1\\)"),
                            ("compare.input_window", "0", "at least 1")):
        with pytest.raises(UsageError, match=match):
            compare_config({key: bad})


def test_a_one_hot_code_s_map_is_the_minimum_norm_one():
    """[one-hot code, 1] is rank-deficient by construction (each block sums to the
    intercept), so its map is chosen as the minimum-norm solution; rows with an unseen
    token (a zero block) get that solution's prediction. (That a rerun's code IIAs are
    identical on the same build is the smoke study's reproduction test.)"""
    import numpy as np
    import torch

    from study.analyses.compare.stitch import apply_map, fit_map
    g = np.random.default_rng(0)
    keys = g.integers(0, 12, size=(2000, 2))
    X = torch.zeros(2000, 24)
    X[np.arange(2000), keys[:, 0]] = 1
    X[np.arange(2000), 12 + keys[:, 1]] = 1
    Y = torch.from_numpy(g.normal(size=(2000, 3))).float()
    M = fit_map(X, Y, one_hot=True)
    pinv = torch.linalg.pinv(torch.cat([X, torch.ones(2000, 1)], 1).double()) @ Y.double()
    assert torch.allclose(M.double(), pinv, atol=1e-5)
    unseen = torch.zeros(5, 24)
    unseen[:, 12 + torch.arange(5)] = 1  # the first offset's token never seen
    assert torch.allclose(apply_map(M, unseen).double(),
                          torch.cat([unseen, torch.ones(5, 1)], 1).double() @ pinv, atol=1e-5)
