"""`emergence`: a hand-built network that holds the resolved value only from a known
checkpoint on is found holding it from there (its IIA low before, high after, and
`appears_at` that checkpoint); a search warm-started from a fit gives the IIA a cold search
gives; the cell is taken from the run's atlas table, and a run asked for emergence without
an atlas is refused when the command line is parsed."""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest
import torch

from study.analyses.common.context import AnalysisContext
from study.analyses.emergence.build import atlas_cells
from study.analyses.emergence.walk import Cell, chosen_steps, walk
from study.claims.emergence import appears_at
from study.core.errors import UsageError
from study.core.registry import get
from tests.analyses.test_atlas import J, LinesTask, Resolver

STEPS = (0, 10, 20, 40, 80, 160, 320)  # the logged checkpoints; the last is analysed
S = 40  # the network holds the resolved value from this checkpoint on
FINAL = STEPS[-1]


def _config(**over):
    """A walk's settings at the planted cell (`role=""`: the cell from the run's atlas)."""
    mine = dict(n_train=256, n_test=200, steps=60, first_steps=200, screen_pairs=128,
                screen_steps=60, screen_batch=16, min_changed=20, role=f"rhs@{J}",
                site="resid", layer=1, k=2)
    return replace(get("analysis", "emergence").make_config("small"), **{**mine, **over})


def _ctx(cfg, analysis_dir=None):
    nets = {s: Resolver(computes=s >= S) for s in STEPS}
    return AnalysisContext(nets[FINAL], LinesTask(), cfg, "resolver", FINAL,
                           torch.device("cpu"), None, model_at=nets.__getitem__, steps=STEPS,
                           analysis_dir=analysis_dir)


def test_a_variable_present_from_a_checkpoint_on_appears_there():
    df = get("analysis", "emergence").obj(_ctx(_config()))["emergence"]
    assert sorted(df["step"]) == list(STEPS) and (df["checkpoint"] == FINAL).all()
    before, after = df[df["step"] < S], df[df["step"] >= S]
    assert (after["iia"] >= 0.95).all(), after
    assert (before["iia"] <= 0.4).all(), before
    # with the cell from settings, the null is the walk's highest shuffled control
    assert df["null"].iloc[0] == df["shuffled_iia"].max() and df["null"].iloc[0] < 0.5
    got = appears_at(df.assign(run="planted"))
    assert len(got) == 1 and got["appears_at"].iloc[0] == S


def test_a_warm_started_search_gives_the_iia_of_a_cold_one():
    cfg = _config()
    ctx = _ctx(cfg)
    c = Cell("resolved", f"rhs@{J}", "resid", 1, 2)
    task = ctx.task
    train = task.counterfactuals("resolved", cfg.n_train, split="train", seed=0)
    test = task.counterfactuals("resolved", cfg.n_test, split="test", seed=0)
    kept: dict = {}
    cold = walk(ctx, c, train, test, [FINAL], None, seed=1, kept=kept)[0]
    # from the cold fit, as the analysed checkpoint starts from the atlas's saved OAF
    warm = walk(ctx, c, train, test, [FINAL], kept[FINAL], seed=2)[0]
    assert cold["iia"] >= 0.9 and abs(warm["iia"] - cold["iia"]) <= 0.02
    # and at an earlier checkpoint, from the later one's fit with a third of the updates
    earlier = walk(ctx, c, train, test, [FINAL, S], None, seed=1)[1]
    cold_there = walk(_ctx(cfg), c, train, test, [S], None, seed=3)[0]
    assert abs(earlier["iia"] - cold_there["iia"]) <= 0.02


def test_the_cell_is_the_atlas_full_row_and_the_null_the_atlas_null():
    row = lambda step, v, role, stage, k, null, t=0.5: dict(  # noqa: E731
        checkpoint=step, variable=v, role=role, site="resid", layer=int(role == "z"),
        stage=stage, k=k, null=null, train_iia=t)
    atlas = pd.DataFrame([
        row(5, "a", "x", "full", 1, 0.1),
        row(9, "a", "y", "screen", 4, 0.2, 0.9),
        row(9, "a", "z", "full", 2, 0.2),
        row(9, "a", "w", "full", 8, 0.2),
        row(9, "b", "x", "screen", 4, 0.3, 0.2),  # b: screened only (too few tested)
        row(9, "b", "y", "screen", 4, 0.3, 0.6),
        row(9, "b", "w", "screen", 4, 0.3, math.nan)])
    assert atlas_cells(atlas, 9) == [Cell("a", "z", "resid", 1, 2, 0.2),
                                     Cell("b", "y", "resid", 0, 4, 0.3)]
    assert atlas_cells(atlas, 5, ("a",)) == [Cell("a", "x", "resid", 0, 1, 0.1)]
    with pytest.raises(UsageError, match="did not search c"):
        atlas_cells(atlas, 9, ("c",))


def test_checkpoints_are_every_logged_one_or_a_log_spaced_choice():
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert chosen_steps(steps, 1024) == steps[::-1]
    assert chosen_steps(steps, 64) == [64, 32, 16, 8, 4, 2, 1, 0]
    got = chosen_steps(steps, 1024, 4)
    assert len(got) == 4 and got[0] == 1024 and got[-1] == 0 and got == sorted(got)[::-1]


def test_appears_at_is_where_the_lower_bound_stays_above_the_null():
    rows = pd.DataFrame(dict(run="r", variable="v", step=[0, 10, 20, 40, 80],
                             iia_lo=[0.1, 0.6, 0.2, 0.7, 0.8], null=0.5, too_few=False))
    assert appears_at(rows)["appears_at"].iloc[0] == 40
    never = rows.assign(iia_lo=[0.1, 0.6, 0.7, 0.8, 0.3])
    assert math.isnan(appears_at(never)["appears_at"].iloc[0])


@pytest.mark.parametrize("analyses,extra,needle", [
    ("emergence", {}, "analysis 'emergence' reads the run's 'atlas' results"),
    ("emergence,atlas", {}, "ask for atlas before it"),
    ("emergence", {"emergence.role": "rhs"}, "emergence.role=rhs: with a role give"),
    ("emergence", {"emergence.role": "bogus", "emergence.site": "state",
                   "emergence.layer": "0", "emergence.k": "2"},
     "emergence.role: 'bogus' is not a token role of binding"),
])
def test_emergence_without_an_atlas_or_with_a_bad_cell_is_refused_when_parsed(analyses, extra,
                                                                              needle):
    from study.run.config import resolve
    with pytest.raises(UsageError, match=needle):
        resolve({"task": "binding", "model": "gru", "scale": "smoke", "analyses": analyses,
                 **extra})


def test_emergence_after_the_atlas_or_at_a_named_cell_is_accepted():
    from study.run.config import resolve
    cfg = resolve({"task": "binding", "model": "gru", "scale": "smoke",
                   "analyses": "atlas,emergence"})
    assert cfg.analyses == ("atlas", "emergence")
    resolve({"task": "binding", "model": "gru", "scale": "smoke", "analyses": "emergence",
             "emergence.role": "rhs", "emergence.site": "state", "emergence.layer": "0",
             "emergence.k": "2"})


def test_the_run_s_atlas_gives_the_cell_the_null_and_the_first_search_s_start(tmp_path):
    from study.analyses.das.alignment import save_alignments
    from study.analyses.emergence.build import atlas_alignment
    cfg = _config(role="", site="", layer=-1, k=0, checkpoints=3, steps=40)
    c = Cell("resolved", f"rhs@{J}", "resid", 1, 2, 0.25)
    folder = tmp_path / "atlas"
    folder.mkdir()
    pd.DataFrame([dict(checkpoint=FINAL, variable="resolved", role=c.role, site="resid",
                       layer=1, stage="full", k=2, null=0.25, train_iia=1.0)]
                 ).to_parquet(folder / "atlas.parquet")
    ctx = _ctx(cfg, analysis_dir=lambda name: tmp_path / name)
    task = ctx.task
    pairs = [task.counterfactuals("resolved", n, split=s, seed=0)
             for n, s in ((cfg.n_train, "train"), (cfg.n_test, "test"))]
    kept: dict = {}
    walk(ctx, c, *pairs, [FINAL], None, seed=1, kept=kept)
    save_alignments({f"oaf/resolved/resid[1]@pair/k=2{suffix}": t
                     for suffix, t in kept[FINAL].saved_tensors().items()}, folder, FINAL)
    assert atlas_alignment(folder, c, FINAL) is not None
    assert atlas_alignment(folder, c, 5) is None  # another checkpoint's: not a start
    df = get("analysis", "emergence").obj(ctx)["emergence"]
    assert list(df["step"]) == [FINAL, 20, 0]  # three log-spaced checkpoints, latest first
    assert (df["null"] == 0.25).all() and (df["role"] == c.role).all()
    assert df["iia"].iloc[0] >= 0.95 and df["iia"].iloc[-1] <= 0.4
