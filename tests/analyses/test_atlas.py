"""The atlas: a hand-built network that resolves each line's value at the line shows that
variable at the line's role and not at the `:`; the null is the controls' maximum over the
whole grid and a cell is credited only above it; roles a task does not declare are refused
when the command line is parsed."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from study.analyses.atlas.build import with_null
from study.analyses.common.context import AnalysisContext
from study.core.errors import UsageError
from study.core.registry import get
from study.models.sites.modules import Sites
from study.tasks.base import Pairs

D, C, M = 10, 4, 5  # site width, values of a line, nuisance letters
L, J = 3, 2  # lines of a program, the line whose resolved value the output reads
# a program: line i is (letter, value) at positions 2i, 2i + 1, then the colon at 2L;
# token ids: values 0..C-1, letters C..C+M-1, the colon C+M
COLON = C + M


class Resolver(nn.Module):
    """resid[0]: each token's embedding. resid[1] at line J's right-hand token holds, in the
    fixed 2-dim subspace Q[:, :2], the value line J resolves to, (value of line 0 + value of
    line J) mod C, read off resid[0] at those two positions; every other position of resid[1]
    holds its own token's nuisance code only. The output at the colon reads resid[1] at line
    J's right-hand token and nowhere else, so the resolved value is held at that line, never
    at the colon. `computes=False` (the step-0 network): resid[1] holds nuisance only."""

    capabilities = frozenset({"residual"})

    def __init__(self, computes: bool = True, seed: int = 0):
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
        self.computes = computes
        self.sites = Sites(resid=2)

    def _value(self, h):  # (batch, D) -> (batch,) the nearest value prototype
        return (-((h @ self.q[:, :2])[:, None] - self.protos) ** 2).sum(-1).argmax(-1)

    def forward(self, ids):
        x = self.sites.resid[0](self.emb[ids])  # (batch, T, D)
        y = x @ self.q  # (batch, T, D) in Q's coordinates
        y = torch.cat([torch.zeros_like(y[..., :2]), y[..., 2:]], -1)  # nuisance only
        T = ids.shape[1]
        if self.computes and T > 2 * J + 1:
            resolved = (self._value(x[:, 1]) + self._value(x[:, 2 * J + 1])) % C  # (batch,)
            y = y.clone()
            y[:, 2 * J + 1, :2] = self.protos[resolved]
        h = self.sites.resid[1](y @ self.q.T)  # (batch, T, D)
        logits = torch.zeros(*ids.shape, C + M + 1, dtype=h.dtype)  # (batch, T, vocab)
        if T > 2 * J + 1:
            read = h[:, 2 * J + 1] @ self.q[:, :2]  # (batch, 2): line J's, only
            logits[:, :, :C] = -((read[:, None] - self.protos) ** 2).sum(-1)[:, None]
        return logits


class LinesTask:
    """Programs of L lines and a colon; the variable `resolved` is line J's resolved value,
    changed through an earlier line (line 0's value), so line J's own tokens never change."""

    name = "lines"
    causal_variables = ("resolved",)
    joint_variables = main_variables = ()
    control_pairs: dict = {}
    role_names = ("letter", "rhs", "colon")
    vocab = tuple(str(i) for i in range(C + M + 1))
    output_ids = tuple(range(C))
    pad_id = COLON

    def _programs(self, rng, n):
        ids = np.empty((n, 2 * L + 1), np.int64)
        ids[:, 0::2] = C + rng.integers(M, size=(n, L + 1))
        ids[:, 1::2] = rng.integers(C, size=(n, L))
        ids[:, 2 * L] = COLON
        return ids

    def split(self, name):
        return type("Split", (), {"ids": self._programs(np.random.default_rng(0), 4)})

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
        resolved = lambda ids: (ids[:, 1] + ids[:, 2 * J + 1]) % C  # noqa: E731
        labels = lambda ids: np.pad(resolved(ids)[:, None], ((0, 0), (2 * L, 0)),  # noqa: E731
                                    constant_values=-1)
        aligned = np.full(n, -1)
        return Pairs(kind, base, source, labels(base), labels(source), aligned, aligned.copy(),
                     {"value": resolved(source)})

    def value_labels(self, pairs, values):
        return None


def _atlas(out_dir=None, **over):
    cfg = replace(get("analysis", "atlas").make_config("small"), n_train=384, n_test=256,
                  screen_pairs=256, screen_k=2, screen_steps=150, screen_batch=32,
                  top=1, k=(2,), steps=200, min_changed=20, **over)
    ctx = AnalysisContext(Resolver(), LinesTask(), cfg, "resolver", 5, torch.device("cpu"),
                          out_dir, model_at=lambda step: Resolver(computes=False))
    return get("analysis", "atlas").obj(ctx)["atlas"]


def test_a_value_resolved_at_its_line_is_found_at_the_line_and_not_at_the_colon(tmp_path):
    df = _atlas(out_dir=tmp_path)
    at = {(r.role, r.layer, r.stage): r for r in df.itertuples()}
    line = at[(f"rhs@{J}", 1, "screen")]
    assert line.iia >= 0.9 and line.credited, line
    full = df[df["stage"] == "full"]  # the full search ran at the best screened cell
    assert list(zip(full["role"], full["layer"])) == [(f"rhs@{J}", 1)]
    assert full["iia"].iloc[0] >= 0.95 and full["credited"].iloc[0]
    colon = df[df["role"] == "colon"]
    assert len(colon) == 2 and not colon["credited"].any() and (colon["iia"] <= 0.3).all()
    # line J's own tokens never change in these pairs: nothing to move at resid[0] there
    assert at[(f"rhs@{J}", 0, "screen")].iia <= 0.3
    # the controls reach nowhere near the resolved value, so the null stays low
    assert df["null"].iloc[0] <= 0.5
    assert set(df["credited"]) == {True, False}
    # the full search's OAF is saved as das saves its own, for comparisons at this cell
    from safetensors import safe_open
    with safe_open(str(tmp_path / "alignments.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        assert f.metadata()["checkpoint"] == "5"
    assert "oaf/resolved/resid[1]@pair/k=2" in keys
    from study.analyses.das.alignment import load_alignment
    inst = load_alignment(tmp_path / "alignments.safetensors", "oaf/resolved/resid[1]@pair/k=2")
    assert inst.k == 2


def test_the_null_is_the_controls_maximum_over_the_grid_and_credits_only_above_it():
    rng = np.random.default_rng(0)
    for _ in range(50):
        rows = []
        for i in range(int(rng.integers(1, 12))):
            lo = float(rng.random())
            row = dict(variable=("a", "b")[i % 2], role=f"r@{i}", site="resid",
                       layer=int(rng.integers(3)), stage=("screen", "full")[i % 3 == 0],
                       iia=min(1.0, lo + 0.05), iia_lo=lo, iia_hi=min(1.0, lo + 0.1),
                       too_few=bool(rng.random() < 0.1),
                       shuffled_iia=float(rng.random()) if rng.random() < 0.9 else math.nan,
                       step0_iia=float(rng.random()) if rng.random() < 0.9 else math.nan)
            if row["stage"] == "full":  # a full search's controls count at every k
                row.update(shuffled_max=float(rng.random()), step0_max=float(rng.random()))
            rows.append(row)
        out = with_null(rows)
        assert len(out) == len(rows)
        for variable in {r["variable"] for r in rows}:
            values = [r.get(key, math.nan) for r in rows if r["variable"] == variable
                      for key in ("shuffled_iia", "step0_iia", "shuffled_max", "step0_max")]
            want = np.nanmax(values) if not np.isnan(values).all() else math.nan
            mine = [r for r in out if r["variable"] == variable]
            assert all(r["null"] == want or (np.isnan(want) and np.isnan(r["null"]))
                       for r in mine)
            for r in mine:
                assert r["credited"] == (not r["too_few"] and r["iia_lo"] > want)
                assert "shuffled_max" not in r


@pytest.mark.parametrize("extra,needle", [
    ({"atlas.roles": "bogus"}, "'bogus' is not a token role of binding"),
    ({"atlas.roles": "rhs@x"}, "'rhs@x' is not a token role of binding"),
    ({"atlas.variables": "bogus"}, "'bogus' is not a causal variable of binding"),
    ({"atlas.layers": "1"}, "atlas.layers=1: state sites have one layer"),
    ({"atlas.screen_steps": "-1"}, "atlas.screen_steps=-1"),
])
def test_settings_the_task_or_model_lacks_are_refused_when_parsed(extra, needle):
    from study.run.config import resolve
    with pytest.raises(UsageError, match=needle.replace("[", r"\[")):
        resolve({"task": "binding", "model": "gru", "scale": "smoke", "analyses": "atlas",
                 **extra})


def test_declared_roles_are_accepted_and_name_the_grid():
    from study.analyses.atlas import roles_of
    from study.run.config import resolve
    resolve({"task": "binding", "model": "gru", "scale": "smoke", "analyses": "atlas",
             "atlas.roles": "rhs,colon,letter@2"})
    names = ["letter@0", "rhs@0", "letter@2", "rhs@2", "colon"]
    assert roles_of(("rhs", "letter@2"), names) == ["rhs@0", "letter@2", "rhs@2"]
    assert roles_of((), names) == names


def test_the_report_draws_one_heatmap_per_family_and_variable_greying_uncredited_cells():
    from pathlib import Path

    import pandas as pd

    from study.claims.runs import RunTables
    from study.reports.sections._atlas import atlas_figures as build

    rows = []
    for variable in ("root_value", "query"):
        for layer in (0, 1):
            for role in ("rhs@0", "rhs@1", "colon"):
                lo = 0.9 if (role, layer) == ("rhs@1", 1) else 0.1
                rows.append(dict(checkpoint=9, model="gru", seed=0, variable=variable,
                                 role=role, site="resid", layer=layer, stage="screen", k=4,
                                 iia=lo + 0.05, iia_lo=lo, iia_hi=lo + 0.1, train_iia=lo,
                                 n_tested=200, too_few=False, shuffled_iia=0.2, step0_iia=0.3,
                                 chance=0.1))
    df = pd.DataFrame(with_null(rows))
    runs = [RunTables(Path(f"/nonexistent/{m}"), {"task": "binding", "model": m, "seed": 0}, {},
                      "done", None, None, {"atlas": df.assign(model=m)}, label=f"{m} s0")
            for m in ("gru", "rope2")]
    figures = build(runs)
    assert len(figures) == 4  # 2 families x 2 variables
    spec = figures[0].spec()
    assert spec["width"] >= 700
    data = next(iter(spec["datasets"].values()))
    shown = {(d["role"], d["site_layer"]) for d in data if d["shown"]}
    assert shown == {("rhs@1", "resid[1]")}  # only the credited cell carries colour
