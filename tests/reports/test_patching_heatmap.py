"""The patching heat map: a counterfactual kind whose answer must stay (no pair tests a flip,
binding's distractor) is drawn apart from the flips, in its own colours, so that a dark cell
there (the answer kept) does not read as a dark flip cell."""
from pathlib import Path

import pandas as pd

from study.claims.runs import RunTables
from study.reports.sections.patching import KEPT, build
from tests.reports.test_sections import problems, views


def _run(kinds):
    rows = [dict(checkpoint=10, site="resid", layer=layer, position=pos, head=-1,
                 counterfactual=kind, metric="flip_rate", value=value, value_all=value_all)
            for kind, value, value_all in kinds for layer in (0, 1) for pos in (0, 1, 2)]
    return RunTables(Path("/nonexistent/rope2"), {"task": "binding", "model": "rope2", "seed": 0},
                     {}, "done", None, None, {"patching": pd.DataFrame(rows)}, label="rope2 s0")


def _schemes(spec) -> dict:
    """counterfactual kind -> the colour scheme its cells are drawn in."""
    out = {}
    for view, rows in views(spec):
        scheme = (view.get("encoding", {}).get("color", {}).get("scale", {}) or {}).get("scheme")
        if scheme:
            for r in rows:
                out.setdefault(r["counterfactual"], set()).add(scheme)
    return out


def test_answer_kept_rows_are_not_shaded_like_flips():
    run = _run([("root_value", 0.9, 0.8), ("distractor", float("nan"), 0.95)])
    fig = next(f for f in build([run]) if f.key.startswith("patching-"))
    spec = fig.spec()
    assert not problems(spec), problems(spec)
    assert _schemes(spec) == {"root_value": {"blues"}, f"distractor{KEPT}": {"greys"}}
    assert "answer kept" in fig.caption


def test_without_a_kept_kind_the_heat_map_is_one_panel_of_flips():
    fig = next(f for f in build([_run([("root_value", 0.9, 0.8)])])
               if f.key.startswith("patching-"))
    assert _schemes(fig.spec()) == {"root_value": {"blues"}}
    assert "answer kept" not in fig.caption
