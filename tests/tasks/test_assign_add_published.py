"""Exoo et al.'s released run as assign_add's reference curves: the shipped table, which runs
get it, the scoring tool's weight loading, and the report's transition table."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import torch

from study.core import registry
from study.claims.runs import RunTables
from study.reports.sections import published as section
from study.tasks.assign_add import AssignAddConfig, AssignAddTask, published
from study.tasks.assign_add.generate import NINE_POOLS

ROOT = Path(__file__).resolve().parents[2]


def _table() -> pd.DataFrame:
    return pd.read_csv(published.TABLE, comment="#")


def test_the_table_is_the_released_checkpoints_on_the_nine_pools():
    t = _table()
    assert list(t.columns) == ["step", *NINE_POOLS]
    # checkpoint_step_N for N = 1, 101, ..., 39,901: weights after N updates
    assert t["step"].tolist() == list(range(1, 40_000, 100))
    acc = t[list(NINE_POOLS)]
    assert ((acc >= 0) & (acc <= 1)).all().all()
    assert (acc.iloc[0] < 0.1).all()  # untrained: near chance, 1/59
    assert (acc.iloc[-1] >= 0.98).all()  # the paper's end state: every pool solved


def test_the_variable_pools_route_where_the_paper_says():
    """Exoo et al.: the variable pools jump near step 5,300; the restricted positions last."""
    t = _table().set_index("step")
    assert t.loc[5301, "var1_seen_allowed"] < 0.9 <= t.loc[5401, "var1_seen_allowed"]
    assert t.loc[5401, "var1_seen_restricted"] < 0.5


@pytest.mark.parametrize("scale", ["paper", "small", "smoke"])
def test_every_preset_has_the_papers_pools_and_gets_the_curves(scale):
    entry = registry.get("task", "assign_add")
    rows = AssignAddTask(entry.make_config(scale)).reference_curves()
    assert {r["split"] for r in rows} == set(NINE_POOLS)
    assert len(rows) == 400 * len(NINE_POOLS)
    assert {r["source"] for r in rows} == {published.SOURCE}


@pytest.mark.parametrize("field, value", [("p", 31), ("seed", 7), ("n_vars", 13), ("seq_len", 14)])
def test_a_run_with_other_pools_gets_none(field, value):
    assert AssignAddTask(AssignAddConfig(**{field: value})).reference_curves() == []


def _tool():
    path = ROOT / "tools" / "authors_loop" / "score_checkpoints.py"
    spec = importlib.util.spec_from_file_location("score_checkpoints", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paper_attn2(seed: int):
    entry = registry.get("model", "attn2")
    torch.manual_seed(seed)
    return entry.obj(entry.make_config("paper"), 74, 16)


def _as_theirs(model) -> dict:
    """Our weights under TransformerLens' names, with the zero biases, the zero layer-0 MLP
    and the buffers their checkpoints also hold."""
    names = {"W_E": "embed.W_E", "W_pos": "pos_embed.W_pos", "W_U": "unembed.W_U"}
    state = {names.get(n, n): p.detach().clone() for n, p in model.named_parameters()}
    state["unembed.W_U"] = state["unembed.W_U"][:, :59]
    state["unembed.b_U"] = torch.zeros(59)
    state["blocks.0.mlp.W_in"] = torch.zeros(128, 512)
    state["blocks.0.attn.b_Q"] = torch.zeros(1, 128)
    state["blocks.0.attn.mask"] = torch.ones(16, 16)
    state["blocks.0.attn.IGNORE"] = torch.tensor(-1e5)
    return state


def test_a_checkpoint_is_loaded_into_our_network_weight_for_weight():
    tool, theirs, ours = _tool(), _paper_attn2(0), _paper_attn2(1)
    tool.load_into(ours, _as_theirs(theirs))
    a, b = dict(theirs.named_parameters()), dict(ours.named_parameters())
    for name, p in a.items():
        if name == "W_U":  # only the 59 number columns are theirs
            assert torch.equal(b[name][:, :59], p[:, :59])
        else:
            assert torch.equal(b[name], p), name


def test_a_non_zero_weight_we_do_not_have_is_refused():
    tool, theirs, ours = _tool(), _paper_attn2(0), _paper_attn2(1)
    state = _as_theirs(theirs)
    state["blocks.0.attn.b_Q"] += 0.1
    with pytest.raises(SystemExit, match="b_Q"):
        tool.load_into(ours, state)


def _run(label, metrics, reference=None) -> RunTables:
    return RunTables(path=Path(label), config={"task": "assign_add"}, summary={}, status="done",
                     metrics=metrics, heuristics=None, reference=reference, label=label)


def _metrics(points: dict[str, list[tuple[int, float]]]) -> pd.DataFrame:
    return pd.DataFrame([{"step": s, "split": split, "stratum": "all", "metric": "accuracy",
                          "value": v} for split, pts in points.items() for s, v in pts])


def test_the_transition_table_gives_each_curves_first_step_at_each_level():
    ref = pd.DataFrame([{"source": "theirs", "step": s, "split": split, "accuracy": v}
                        for split, pts in {"p1": [(0, 0.0), (100, 0.6), (200, 0.97)],
                                           "p2": [(0, 0.0), (100, 0.1), (200, 0.3)]}.items()
                        for s, v in pts])
    run = _run("ours", _metrics({"p1": [(0, 0.0), (50, 0.4), (100, 0.5), (1150, 0.99)],
                                 "p2": [(0, 0.0), (50, 0.96), (100, 0.97), (1150, 0.99)],
                                 "val": [(0, 0.0), (150, 1.0)]}), ref)
    figs = section.build([run])
    table = next(f.table for f in figs if f.key == "published-steps").set_index("split")
    assert table.loc["p1"].tolist() == ["100", "200", "100", "1,150"]
    assert table.loc["p2"].tolist() == ["—", "—", "50", "50"]
    assert list(table.columns) == ["theirs, every 100: ≥ 50%", "theirs, every 100: ≥ 95%",
                                   "ours, every 50: ≥ 50%", "ours, every 50: ≥ 95%"]
    assert "val" not in table.index  # the published run was not scored on it


def test_runs_without_a_published_run_get_no_section():
    run = _run("ours", _metrics({"p1": [(0, 0.0), (100, 1.0)]}))
    assert section.build([run]) == []
