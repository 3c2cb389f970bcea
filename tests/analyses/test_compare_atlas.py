"""Comparisons at each run's own atlas cell (`compare.site=atlas`): two hand-built networks
hold one variable at different token roles; read each where its atlas found it, A stitches
into B as well as B's own interchange, and B's own IIA is the atlas's; read both at one
role, A carries nothing into B. A run without an atlas is refused before any network runs."""
from __future__ import annotations

import math
import shutil
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from study.analyses.common.context import AnalysisContext
from study.analyses.compare import CompareConfig, Subject, compare
from study.core.errors import UsageError
from study.core.registry import get
from study.models.sites.modules import Sites
from study.tasks.base import Examples, Pairs

D, C, M = 10, 4, 5  # site width, values of a line, nuisance letters
L = 4  # lines of a program: line i is (letter, value) at 2i, 2i + 1; the colon at 2L
# token ids: values 0..C-1, letters C..C+M-1, the colon C+M
COLON = C + M
A_AT, B_AT = 3, 7  # where each network holds the resolved value: rhs@1 and rhs@3


class Holder(nn.Module):
    """resid[0]: each token's embedding (a value token carries its value in Q[:, :2]). resid[1]
    at position `at` holds, in Q[:, :2], the value line 1 resolves to, (value of line 0 +
    value of line 1) mod C, read off resid[0] at positions 1 and 3, and nothing else; every
    other position of resid[1] holds its token's nuisance code only. The output at every
    position reads resid[1] at `at` and nowhere else. Q is drawn from `seed`, so two holders
    code the value in different coordinates."""

    capabilities = frozenset({"residual"})

    def __init__(self, at: int, computes: bool = True, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(D, D, generator=g))
        angle = 2 * math.pi * torch.arange(C) / C
        self.register_buffer("protos", 3 * torch.stack([angle.cos(), angle.sin()], 1))  # (C, 2)
        tokens = torch.zeros(C + M + 1, D)
        tokens[:C, :2] = self.protos  # a value token carries its value
        tokens[:, 2:] = torch.randn(C + M + 1, D - 2, generator=g)  # and a nuisance code
        self.register_buffer("emb", tokens @ q.T)  # (vocab, D)
        self.register_buffer("q", q)
        self.at, self.computes = at, computes
        self.sites = Sites(resid=2)

    def _value(self, h):  # (batch, D) -> (batch,) the nearest value prototype
        return (-((h @ self.q[:, :2])[:, None] - self.protos) ** 2).sum(-1).argmax(-1)

    def forward(self, ids):
        x = self.sites.resid[0](self.emb[ids])  # (batch, T, D)
        y = x @ self.q  # (batch, T, D) in Q's coordinates
        y = torch.cat([torch.zeros_like(y[..., :2]), y[..., 2:]], -1)  # nuisance only
        T = ids.shape[1]
        if self.computes and T > self.at:
            resolved = (self._value(x[:, 1]) + self._value(x[:, 3])) % C  # (batch,)
            y = y.clone()
            y[:, self.at] = 0  # the value alone there
            y[:, self.at, :2] = self.protos[resolved]
        h = self.sites.resid[1](y @ self.q.T)  # (batch, T, D)
        logits = torch.zeros(*ids.shape, C + M + 1, dtype=h.dtype)  # (batch, T, vocab)
        if T > self.at:
            read = h[:, self.at] @ self.q[:, :2]  # (batch, 2): at `at` only
            logits[:, :, :C] = -((read[:, None] - self.protos) ** 2).sum(-1)[:, None]
        return logits


class Lines:
    """Programs of L lines and a colon; the variable `resolved` is line 1's resolved value,
    changed through line 0's value; the label is the answer at the colon."""

    name = "lines"
    causal_variables = ("resolved",)
    joint_variables = main_variables = ()
    control_pairs: dict = {}
    role_names = ("letter", "rhs", "colon")
    splits = ("test",)
    vocab = tuple(str(i) for i in range(C + M + 1))
    output_ids = tuple(range(C))
    pad_id = COLON
    config = SimpleNamespace(held_out=())

    def _programs(self, rng, n):
        ids = np.empty((n, 2 * L + 1), np.int64)
        ids[:, 0::2] = C + rng.integers(M, size=(n, L + 1))
        ids[:, 1::2] = rng.integers(C, size=(n, L))
        ids[:, 2 * L] = COLON
        return ids

    @staticmethod
    def _resolved(ids):
        return (ids[:, 1] + ids[:, 3]) % C

    def split(self, name):
        ids = self._programs(np.random.default_rng(0), 64)
        return Examples(ids, self.labels_of(ids))

    def labels_of(self, ids):
        ids = np.asarray(ids)
        return np.pad(self._resolved(ids)[:, None], ((0, 0), (2 * L, 0)), constant_values=-1)

    def probe_variables(self, ids, labels=None):
        ids = np.asarray(ids)
        out = np.full(ids.shape, -1)
        out[:, 3:] = self._resolved(ids)[:, None]  # known once line 1 is read
        return {"resolved": out}

    def roles(self, ids):
        n = len(ids)
        out = {}
        for i in range(L):
            out[f"letter@{i}"] = np.full(n, 2 * i)
            out[f"rhs@{i}"] = np.full(n, 2 * i + 1)
        out["colon"] = np.full(n, 2 * L)
        return out

    def counterfactuals(self, kind, n, split="test", seed=0):
        rng = np.random.default_rng([seed, split == "test"])
        base = self._programs(rng, n)
        source = base.copy()
        source[:, 1] = (base[:, 1] + rng.integers(1, C, size=n)) % C  # line 0's value
        aligned = np.full(n, -1)
        return Pairs(kind, base, source, self.labels_of(base), self.labels_of(source), aligned,
                     aligned.copy(), {"value": self._resolved(source)})

    def value_labels(self, pairs, values):
        return None

    def fingerprint(self):
        return self.name


N_TEST = 256


def _atlas_run(root, name, at, seed):
    """A run directory laid out as the application writes one: the atlas of a Holder at
    `at` in RUN/analyses/atlas (resid[1] only: resid[0] holds line 0's value at rhs@0 in
    every network alike)."""
    out = root / name / "analyses" / "atlas"
    out.mkdir(parents=True)
    cfg = replace(get("analysis", "atlas").make_config("small"), layers=(1,), n_train=256,
                  n_test=N_TEST, screen_pairs=128, screen_k=2, screen_steps=60,
                  screen_batch=32, top=1, k=(2,), steps=80, min_changed=20)
    model = Holder(at, seed=seed).eval()
    ctx = AnalysisContext(model, Lines(), cfg, "holder", 5, torch.device("cpu"), out,
                          model_at=lambda step: Holder(at, computes=False, seed=seed))
    df = get("analysis", "atlas").obj(ctx)["atlas"]
    df.to_parquet(out / "atlas.parquet")
    return Subject(str(root / name), "holder", 5, model, out / "alignments.safetensors"), df


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    a, atlas_a = _atlas_run(root, "a", A_AT, seed=1)
    b, atlas_b = _atlas_run(root, "b", B_AT, seed=2)
    return root, a, b, atlas_a, atlas_b


def _compare(subjects, **over):
    cfg = CompareConfig(site=("atlas",), n_fit=400, n_test=N_TEST, n_geometry=40, **over)
    return compare(subjects, Lines(), cfg, torch.device("cpu"))


def _row(df, run, other):
    sel = (df["run"] == run) & (df["other_run"] == other)
    assert sel.sum() == 1, (run, other)
    return df[sel].iloc[0]


@pytest.fixture(scope="module")
def tables(runs):
    _, a, b, _, _ = runs
    return _compare([a, b])


def test_each_atlas_holds_the_variable_at_its_own_role(runs):
    _, _, _, atlas_a, atlas_b = runs
    for df, at in ((atlas_a, f"rhs@{A_AT // 2}"), (atlas_b, f"rhs@{B_AT // 2}")):
        full = df[df["stage"] == "full"].iloc[0]
        assert (full["role"], full["layer"]) == (at, 1) and full["iia"] >= 0.9


def test_stitching_at_each_runs_own_cell_reaches_bs_own_iia_and_names_the_roles(tables, runs):
    _, a, b, _, _ = runs
    st = tables["compare_stitching"]
    ab = _row(st, a.run, b.run)
    assert (ab["role"], ab["other_role"]) == ("rhs@1", "rhs@3")
    assert ab["site"] == ab["other_site"] == "resid[1]@pair"
    assert ab["own_iia"] >= 0.9
    assert abs(ab["iia"] - ab["own_iia"]) <= 0.05, ab
    assert abs(ab["decode_iia"] - ab["own_iia"]) <= 0.05, ab
    assert ab["chance_iia"] <= 0.5  # B written with other pairs' sources
    ba = _row(st, b.run, a.run)
    assert (ba["role"], ba["other_role"]) == ("rhs@3", "rhs@1")
    assert abs(ba["iia"] - ba["own_iia"]) <= 0.05, ba
    # the similarity and geometry rows say where each run was read too
    sim = tables["compare_similarity"]
    assert set(zip(sim["run"], sim["role"], sim["other_role"])) == {
        (a.run, "rhs@1", "rhs@1"), (a.run, "rhs@1", "rhs@3"),
        (b.run, "rhs@3", "rhs@1"), (b.run, "rhs@3", "rhs@3")}
    geo = tables["compare_geometry"]
    assert dict(zip(geo["run"], geo["role"])) == {a.run: "rhs@1", b.run: "rhs@3"}


def test_bs_own_iia_is_the_atlas_full_rows_on_the_same_pairs(tables, runs):
    _, a, b, _, atlas_b = runs
    full = atlas_b[atlas_b["stage"] == "full"].iloc[0]
    row = _row(tables["compare_stitching"], a.run, b.run)
    assert row["k"] == full["k"]
    assert row["n_tested"] == full["n_tested"]  # the same tested pairs
    assert abs(row["own_iia"] - full["iia"]) <= 0.02, (row["own_iia"], full["iia"])


def test_reading_both_runs_at_one_role_carries_nothing(runs, tmp_path):
    """A read at B's role (its own alignment, moved there): A holds nothing at that token,
    so the stitching falls to chance while B's own IIA stays."""
    root, a, b, _, _ = runs
    moved = tmp_path / "a_at_b" / "analyses" / "atlas"
    shutil.copytree(root / "a" / "analyses" / "atlas", moved)
    df = pd.read_parquet(moved / "atlas.parquet")
    df.loc[df["stage"] == "full", "role"] = f"rhs@{B_AT // 2}"
    df.to_parquet(moved / "atlas.parquet")
    a_moved = Subject(str(tmp_path / "a_at_b"), "holder", 5, a.model,
                      moved / "alignments.safetensors")
    st = _compare([a_moved, b])["compare_stitching"]
    ab = _row(st, a_moved.run, b.run)
    assert (ab["role"], ab["other_role"]) == ("rhs@3", "rhs@3")
    assert ab["own_iia"] >= 0.9 and ab["iia"] <= 0.45, ab


def test_a_run_without_an_atlas_is_refused_before_any_network_runs(runs, tmp_path):
    _, a, _, _, _ = runs
    calls = []

    class Counted(nn.Module):  # a network that records being run
        def forward(self, ids):
            calls.append(1)
            return a.model(ids)

    first = Subject(a.run, "holder", 5, Counted(), a.alignments)
    das_only = tmp_path / "c" / "analyses" / "das"
    das_only.mkdir(parents=True)
    shutil.copy(a.alignments, das_only / "alignments.safetensors")
    bare = Subject(str(tmp_path / "c"), "holder", 5, Counted(),
                   das_only / "alignments.safetensors")
    with pytest.raises(UsageError, match=r"compare.site=atlas: .*c has no atlas.*analyze "
                                         r".*analysis=atlas"):
        _compare([first, bare])
    with pytest.raises(UsageError, match=r"has no full atlas row for 'other'"):
        _compare([first], variables=("other",))
    assert not calls


def test_the_application_refuses_a_run_without_an_atlas_before_loading_it(runs, tmp_path):
    from study.run.compare import compare_config, subjects_of
    root, _, _, _, _ = runs
    loaded = []

    def fake(path):
        return SimpleNamespace(path=path, checkpoints=[5], task=Lines(),
                               config=SimpleNamespace(model="holder"),
                               model=lambda step, device: loaded.append(path))

    cfg = compare_config({"compare.site": "atlas"})
    (tmp_path / "bare").mkdir()
    with pytest.raises(UsageError, match="bare has no atlas"):
        subjects_of({"a": fake(root / "a"), "bare": fake(tmp_path / "bare")}, "cpu", cfg)
    with pytest.raises(UsageError, match="no full atlas row for 'other'"):
        subjects_of({"a": fake(root / "a")}, "cpu", replace(cfg, variables=("other",)))
    assert not loaded
    groups = subjects_of({"a": fake(root / "a"), "b": fake(root / "b")}, "cpu", cfg)
    (_, subjects), = groups.values()
    assert [s.alignments.parent.name for s in subjects] == ["atlas", "atlas"]


@pytest.mark.parametrize("over,needle", [
    ({"compare.site": "atlas,best"}, "atlas stands alone"),
    ({"compare.site": "atlas", "compare.alignment": "laf"}, "the atlas saves OAF only"),
])
def test_the_atlas_rule_stands_alone_and_reads_oaf(over, needle):
    from study.run.compare import compare_config
    assert compare_config({"compare.site": "atlas"}).site == ("atlas",)
    with pytest.raises(UsageError, match=needle):
        compare_config(over)


def test_captions_name_each_runs_role():
    from study.reports.sections._compare import sites_note
    df = pd.DataFrame({"run": ["a", "b", "c"], "site": ["resid[1]@pair"] * 2 + ["state@pair"],
                       "role": ["rhs@1", "rhs@3", "rhs@3"]})
    assert sites_note(df) == (" Sites read: resid[1]@pair at rhs@1 in a; resid[1]@pair at "
                              "rhs@3 in b; state@pair at rhs@3 in c.")
    assert sites_note(df.assign(role="")) == (" Sites read: resid[1]@pair in a, b; "
                                              "state@pair in c.")


def test_a_role_away_from_pairs_that_carry_their_own_positions_is_warned(runs):
    """Pairs that name their own positions (the colon here) have labels computed for an
    intervention there; a run read at another role is told so."""
    _, a, b, _, _ = runs

    class AtTheColon(Lines):
        def counterfactuals(self, kind, n, split="test", seed=0):
            p = super().counterfactuals(kind, n, split, seed)
            at = np.full(n, 2 * L)
            return replace(p, base_pos=at, source_pos=at.copy())

    cfg = CompareConfig(site=("atlas",), n_fit=100, n_test=64, n_geometry=8)
    with pytest.warns(UserWarning) as got:
        compare([a, b], AtTheColon(), cfg, torch.device("cpu"))
    said = [str(w.message) for w in got]
    for run, role in ((a.run, "rhs@1"), (b.run, "rhs@3")):
        assert any(f"{run} is read at {role}, which is theirs in 0%" in m for m in said), said


def test_counting_runs_are_not_read_at_their_own_roles_with_one_pair_set():
    """Counting's pairs are labelled for the step they intervene at (the atlas draws them at
    each role), so reading two runs at their own roles through one pair set is refused in one
    line, naming the rule to use."""
    from study.analyses.compare.paired import RolePairs
    from study.core.errors import UsageError
    from study.tasks.counting import CountingConfig, CountingTask
    task = CountingTask(CountingConfig(n_train=64, n_val=32, n_test=32))
    pairs = RolePairs({"test": task.counterfactuals("up_down:count", 20, split="test")}, task)
    assert len(pairs.get("test")[0].base_ids) == 20  # no roles: every pair, its own positions
    with pytest.raises(UsageError, match="compare.site=best"):
        pairs.get("test", ("response@1",))
