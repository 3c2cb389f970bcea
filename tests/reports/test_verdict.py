"""The verdict section: the rule on planted numbers gives each verdict, the table has a row
per trained alignment read by training IIA against that alignment's controls (random,
shuffled, step 0), an interval over seeds where an architecture has several, and its chart
has data for every encoding."""
import math
from pathlib import Path

import pandas as pd
import pytest

from study.claims.runs import RunTables
from study.reports.sections.das import build as das_build
from study.claims.aligned import verdict_numbers
from study.claims.rules import ALIGNED_IIA, MARGIN, verdict
from study.reports.sections.verdict import build, verdict_table
from tests.reports.test_sections import problems


def test_the_rule_gives_each_verdict():
    # verdict(iia, lo, random, shuffled, step0)
    assert verdict(0.97, 0.95, 0.30, 0.60, 0.2) == "aligned"  # 0.95 >= 0.60 + 0.1, IIA >= 0.9
    assert verdict(0.80, 0.74, 0.30, 0.60, 0.2) == "partial"  # clears all, IIA < 0.9
    assert verdict(0.95, 0.65, 0.30, 0.60, 0.2) == "not aligned"  # within the margin
    assert verdict(0.95, 0.92, 0.85, 0.10, 0.1) == "not aligned"  # the random rotation as good
    assert verdict(0.95, 0.92, 0.10, 0.10, 0.85) == "not aligned"  # step 0 as good
    assert verdict(float("nan"), float("nan"), 0.1, 0.1, 0.1) == "too few pairs"
    assert verdict(0.97, 0.95, 0.30, float("nan"), 0.1) == "no control"  # no shuffled control
    assert verdict(0.97, 0.95, 0.30, 0.20) == "aligned"  # no step-0 control: the other two
    assert MARGIN == 0.1 and ALIGNED_IIA == 0.9


def _rows(checkpoint, alignment, k, train, test, lo=None, hi=None, variable="count",
          too_few=False):
    base = dict(checkpoint=checkpoint, variable=variable, site="state", layer=0, position=-1,
                alignment=alignment, k=k, n_pairs=500, n_changed=60, n_tested=60, too_few=too_few,
                iia_all=0.9, iia_restart_sd=0.01)
    nan = float("nan")
    return [{**base, "split": "train", "iia": train, "iia_lo": nan, "iia_hi": nan},
            {**base, "split": "test", "iia": test,
             "iia_lo": test - 0.02 if lo is None else lo,
             "iia_hi": test + 0.02 if hi is None else hi}]


# model -> (das rows, das_shuffled rows, das_control rows); the comments give the expected
# verdict of each trained alignment
PLANTED = {
    # oaf aligned: best train IIA at k=2, test 0.96 [0.93, 0.98]; controls 0.2 / 0.5 / 0.3.
    # laf not aligned: 0.99 [0.97, 1.0] but its shuffled control reaches 0.9
    "gru": ([*_rows(20, "oaf", 2, 0.99, 0.96, 0.93, 0.98), *_rows(20, "oaf", 4, 0.95, 0.97),
             *_rows(20, "laf", 2, 0.98, 0.99, 0.97, 1.0), *_rows(20, "random", 2, 0.2, 0.2)],
            [*_rows(20, "oaf", 4, 0.6, 0.5), *_rows(20, "laf", 4, 0.95, 0.9)],
            [*_rows(0, "oaf", 4, 0.4, 0.3), *_rows(0, "laf", 4, 0.5, 0.45)]),
    # laf partial: 0.8 [0.75, 0.85] clears max(0.3, 0.6, 0.2) + 0.1 = 0.7; oaf not aligned;
    # laf_sd (the authors' LAF) has no shuffled control: no control
    "lstm": ([*_rows(20, "oaf", 4, 0.7, 0.7), *_rows(20, "laf", 4, 0.85, 0.8, 0.75, 0.85),
              *_rows(20, "laf_sd", 4, 0.6, 0.6), *_rows(20, "random", 4, 0.3, 0.3)],
             [*_rows(20, "oaf", 4, 0.6, 0.6), *_rows(20, "laf", 4, 0.6, 0.6)],
             [*_rows(0, "laf", 4, 0.3, 0.2)]),
    # oaf not aligned: 0.95 [0.9, 0.97] but the step-0 control reaches 0.85
    "rope2": ([*_rows(20, "oaf", 2, 0.99, 0.95, 0.9, 0.97), *_rows(20, "random", 2, 0.1, 0.1)],
              [*_rows(20, "oaf", 2, 0.2, 0.1)],
              [*_rows(0, "oaf", 2, 0.9, 0.85)]),
}
EXPECTED = {  # (model, alignment) -> (verdict, iia, random, shuffled, step0)
    ("gru", "oaf"): ("aligned", 0.96, 0.2, 0.5, 0.3),
    ("gru", "laf"): ("not aligned", 0.99, 0.2, 0.9, 0.45),
    ("lstm", "oaf"): ("not aligned", 0.7, 0.3, 0.6, float("nan")),
    ("lstm", "laf"): ("partial", 0.8, 0.3, 0.6, 0.2),
    ("lstm", "laf_sd"): ("no control", 0.6, 0.3, float("nan"), float("nan")),
    ("rope2", "oaf"): ("not aligned", 0.95, 0.1, 0.1, 0.85),
}


def _run(model, das, shuffled, control, seed=0):
    tables = {"das": pd.DataFrame(das), "das_shuffled": pd.DataFrame(shuffled),
              "das_control": pd.DataFrame(control)}
    return RunTables(Path(f"/nonexistent/{model}{seed}"),
                     {"task": "counting", "model": model, "seed": seed}, {}, "done", None, None,
                     tables, label=f"{model} s{seed}")


@pytest.fixture
def planted():
    return [_run(m, *tables) for m, tables in PLANTED.items()]


def test_the_verdict_has_a_row_per_alignment_judged_against_its_own_controls(planted):
    numbers = verdict_numbers(planted)
    got = numbers.set_index(["model", "alignment"])
    assert sorted(got.index) == sorted(EXPECTED)  # one row per (run, variable, alignment)
    for key, (want, iia, random, shuffled, step0) in EXPECTED.items():
        row = got.loc[key]
        assert row["verdict"] == want, (key, row.to_dict())
        assert row["iia"] == pytest.approx(iia)
        for field, value in (("random", random), ("shuffled", shuffled), ("step0", step0)):
            assert row[field] == pytest.approx(value, nan_ok=True), (key, field)
    assert got.loc[("gru", "oaf"), "where"] == "k=2 state"  # by train IIA, not k=4's test
    table = verdict_table(numbers)
    assert list(table.columns) == ["model", "seed", "alignment", "count"]
    assert len(table) == len(EXPECTED)  # one seed each: no row over seeds
    lstm = table[(table["model"] == "lstm") & (table["alignment"] == "LAF")]
    assert lstm["count"].item().startswith("partial: 0.80 [0.75")
    assert "shuffled 0.60" in lstm["count"].item()


def test_several_seeds_add_an_interval_over_seeds_beside_each_runs_wilson_interval():
    runs = [_run("gru", [*_rows(20, "oaf", 2, 0.99, iia, iia - 0.03, iia + 0.02),
                         *_rows(20, "random", 2, 0.1, 0.1)],
                 _rows(20, "oaf", 2, 0.2, 0.2), [], seed=s)
            for s, iia in enumerate((0.90, 0.94, 0.98))]
    numbers = verdict_numbers(runs)
    assert len(numbers) == 3 and (numbers["n_seeds"] == 3).all()
    row = numbers.iloc[0]
    assert row["seeds_iia"] == pytest.approx(0.94)
    # t interval: 0.94 ± t(0.975, 2) * 0.04 / sqrt(3) = 0.94 ± 0.099 (the seeds' sd 0.04
    # exceeds the restarts' 0.01)
    assert row["seeds_lo"] == pytest.approx(0.94 - 4.303 * 0.04 / math.sqrt(3), abs=1e-3)
    assert row["seeds_hi"] == pytest.approx(1.0)  # clipped: IIA is a share
    table = verdict_table(numbers)
    over = table[table["seed"] == "all"]
    assert len(over) == 1 and over["count"].item().startswith("0.94 [0.84, 1.00] over 3 seeds")


def test_a_run_that_did_not_learn_the_task_gets_no_verdict_but_keeps_its_numbers():
    """A network on the plateau (test 0.55) that scores high at a site its readout reads gets
    "did not learn" instead of "aligned", in every seed and in the row over seeds; the
    numbers stay in its cell. A run without a recorded accuracy is judged as before."""
    runs = []
    for s, acc in enumerate((0.55, 0.54, None)):
        run = _run("attn2", [*_rows(20, "oaf", 2, 0.95, 0.93, 0.90, 0.95),
                             *_rows(20, "random", 2, 0.05, 0.05)],
                   _rows(20, "oaf", 2, 0.1, 0.05), _rows(0, "oaf", 2, 0.1, 0.0), seed=s)
        if acc is not None:
            run.summary["test_accuracy"] = acc
        runs.append(run)
    numbers = verdict_numbers(runs)
    assert list(numbers["verdict"]) == ["did not learn", "did not learn", "aligned"]
    assert numbers["acc_test"].iloc[0] == pytest.approx(0.55)
    table = verdict_table(numbers)
    cell = table.loc[table["seed"] == "0", "count"].item()
    assert cell.startswith("did not learn the task (test 0.55 < 0.9), no verdict: 0.93 [0.90")
    assert not table.loc[table["seed"] == "all", "count"].item().startswith("no seed")
    table = verdict_table(verdict_numbers(runs[:2]))
    assert table.loc[table["seed"] == "all", "count"].item().startswith("no seed learned the task")


def test_runs_that_did_not_learn_and_scored_nothing_get_one_line_each_not_a_table(planted):
    """A smoke run at test accuracy 0 has no scored IIA: the section says so in one line per
    run, with no verdict table of dashes; beside a learned run, the learned run keeps its
    table and the other its line."""
    nan = float("nan")
    flat = []
    for model in ("gru", "lstm"):
        run = _run(model, [*_rows(20, "oaf", 2, nan, nan, nan, nan, too_few=True),
                           *_rows(20, "random", 2, nan, nan, nan, nan, too_few=True)], [], [])
        run.summary["test_accuracy"] = 0.0
        flat.append(run)
    figs = build(flat)
    assert [f.key for f in figs] == ["verdict-not-learned"]
    assert [r.split(" (")[0] for r in figs[0].table["run"]] == ["gru s0", "lstm s0"]
    assert all(v.startswith("none: did not learn") for v in figs[0].table["verdict"])
    assert len(figs[0].caption.split()) < 30
    figs = {f.key: f for f in build([planted[0], flat[1]])}
    assert set(figs["verdict"].table["model"]) == {"gru"}
    assert [r.split(" (")[0] for r in figs["verdict-not-learned"].table["run"]] == ["lstm s0"]


def test_too_few_changed_pairs_is_reported_not_scored(planted):
    nan = float("nan")
    run = _run("gru", [*_rows(20, "oaf", 2, nan, nan, nan, nan, too_few=True),
                       *_rows(20, "random", 2, nan, nan, nan, nan, too_few=True)], [], [])
    (row,) = verdict_numbers([run]).to_dict("records")
    assert row["verdict"] == "too few pairs" and row["too_few"] and math.isnan(row["iia"])
    assert verdict_table(verdict_numbers([run]))["count"].item() == "too few tested pairs"


def test_the_section_opens_with_the_table_and_its_chart_and_das_draws_the_controls(planted):
    figs = build(planted)
    assert [f.key for f in figs] == ["verdict", "verdict-rule", "verdict-iia"]
    assert figs[0].table is not None and len(figs[0].table) == len(EXPECTED)
    # above the table, the verdict in plain words: gru aligned (its OAF), lstm partial
    (said,) = figs[0].points
    assert said.startswith("count: gru holds it in a subspace (OAF, k = 2 at state, IIA 0.96)")
    assert "lstm holds part of it" in said and "rope2 does not" in said
    spec = figs[2].spec()
    assert not problems(spec), problems(spec)
    # the three controls are told apart by shape, named in the legend beside the alignments
    (controls,) = [layer for layer in spec["spec"]["layer"]
                   if layer["encoding"].get("shape", {}).get("field") == "control"]
    shape = controls["encoding"]["shape"]
    assert shape["scale"]["domain"][-3:] == ["random rotation", "shuffled variable",
                                             "step-0 network"]
    assert len(set(shape["scale"]["range"])) == len(shape["scale"]["domain"])
    assert shape.get("legend", {}) is not None
    rows = [r for rs in spec["datasets"].values() for r in rs]
    assert {r["run"] for r in rows} == {"gru s0", "lstm s0", "rope2 s0"}
    assert {r["alignment"] for r in rows} == {"OAF", "LAF", "LAF (authors')"}
    das = {f.key: f for f in das_build(planted)}["das-iia"].spec()
    assert not problems(das), problems(das)
    drawn = [r for rs in das["datasets"].values() for r in rs]
    assert {r["alignment"] for r in drawn} == {"oaf", "laf", "laf_sd", "random"}
    # the controls are drawn at the k they ran at, and only there
    controls = {(r["model"], r["alignment"], r["control"], r["k"]) for r in drawn
                if r["control"]}
    assert controls == {("gru", "oaf", "shuffled", 4), ("gru", "laf", "shuffled", 4),
                        ("gru", "oaf", "step 0", 4), ("gru", "laf", "step 0", 4),
                        ("lstm", "oaf", "shuffled", 4), ("lstm", "laf", "shuffled", 4),
                        ("lstm", "laf", "step 0", 4), ("rope2", "oaf", "shuffled", 2),
                        ("rope2", "oaf", "step 0", 2)}


def test_the_das_line_style_legend_draws_line_styles(planted):
    """Vega-Lite draws a legend from its layers' marks: a line with `point: true` gives dots,
    and the OAF / LAF / random legend would show names without their dashes. Every layer that
    encodes the line style is a plain line."""
    spec = {f.key: f for f in das_build(planted)}["das-iia"].spec()
    marks = [layer["mark"] for layer in spec["spec"]["layer"]
             if "strokeDash" in layer.get("encoding", {})]
    assert marks
    for mark in marks:
        mark = mark if isinstance(mark, dict) else {"type": mark}
        assert mark["type"] == "line" and not mark.get("point"), mark


def test_a_search_at_one_k_puts_the_alignments_on_the_x_axis_with_their_controls():
    """At a single k a line joins nothing, so line styles cannot tell the alignments apart:
    each alignment gets its own column, its controls hollow marks in it, and the range over
    seeds a rule."""
    runs = [_run("gru", [*_rows(20, "oaf", 16, 0.7, 0.6 + 0.1 * seed),
                         *_rows(20, "laf_sd", 16, 0.99, 0.99), *_rows(20, "random", 16, 0.01, 0.01)],
                 _rows(20, "oaf", 16, 0.1, 0.05), _rows(0, "oaf", 16, 0.02, 0.02), seed=seed)
            for seed in (0, 1)]
    fig = {f.key: f for f in das_build(runs)}["das-iia"]
    assert fig.title == "DAS: IIA at subspace size k = 16"
    spec = fig.spec()
    assert not problems(spec), problems(spec)
    layers = spec["spec"]["layer"]
    assert {layer["encoding"]["x"]["field"] for layer in layers} == {"alignment"}
    assert [layer["mark"]["type"] for layer in layers] == ["point", "rule", "point"]
    drawn = [r for rs in spec["datasets"].values() for r in rs]
    assert {(r["alignment"], r["control"]) for r in drawn} == {
        ("oaf", ""), ("laf_sd", ""), ("random", ""), ("oaf", "shuffled"), ("oaf", "step 0")}
    oaf = next(r for r in drawn if (r["alignment"], r["control"]) == ("oaf", ""))
    assert (oaf["min"], oaf["max"]) == pytest.approx((0.6, 0.7))


def test_controls_are_read_at_the_candidates_own_site_and_k_with_its_chance_level():
    """The controls climb the search's ladder, so each is read where the candidate is (k = 2
    here, chosen by training IIA), not at its best k; the chance level comes with it."""
    das = [*_rows(20, "oaf", 2, 0.99, 0.96, 0.93, 0.98), *_rows(20, "oaf", 4, 0.9, 0.97),
           *_rows(20, "random", 2, 0.1, 0.1), *_rows(20, "random", 4, 0.5, 0.5)]
    for r in das:
        r["chance"] = 0.11 if r["k"] == 2 else 0.2
    shuffled = [*_rows(20, "oaf", 2, 0.3, 0.3), *_rows(20, "oaf", 4, 0.9, 0.85)]
    step0 = [*_rows(0, "oaf", 2, 0.2, 0.2), *_rows(0, "oaf", 4, 0.6, 0.6)]
    (row,) = verdict_numbers([_run("gru", das, shuffled, step0)]).to_dict("records")
    assert row["where"] == "k=2 state"
    assert (row["random"], row["shuffled"], row["step0"], row["chance"]) == (0.1, 0.3, 0.2, 0.11)
    assert row["verdict"] == "aligned"  # at k = 4 the shuffled control (0.85) would bar it
    assert "chance 0.11" in verdict_table(verdict_numbers([_run("gru", das, shuffled,
                                                                 step0)])).iloc[0]["count"]
