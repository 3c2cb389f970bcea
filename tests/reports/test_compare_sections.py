"""The comparison sections (subspace similarity, value geometry, stitching) and the circuit
roles chart: computed by `study compare` on copies of the smoke runs, every chart has rows
for every run and every encoded field."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from study.reports.build import build_report
from study.claims.runs import load_runs
from study.claims.learnt import display_label
from tests.reports.conftest import DAS
from tests.reports.test_chart_layout import layout_problems
from tests.reports.test_sections import chart_rows, problems

COUNTING_LABELS = {"gru s0", "gru s1", "lstm s0", "rope2 s0"}


@pytest.fixture(scope="module")
def compared(counting_runs, tmp_path_factory):
    """Copies of the counting smoke runs (checkpoints kept) after `compare_runs`."""
    from study.analyses.compare import CompareConfig
    from study.run.compare import compare_runs

    root = tmp_path_factory.mktemp("compared")
    dirs = [shutil.copytree(src, root / src.name, ignore=shutil.ignore_patterns("report*"))
            for src in counting_runs]
    cfg = CompareConfig(n_fit=64, n_test=48, n_geometry=24, n_perm=2)
    tables = compare_runs(dirs, root / "report", cfg, device="cpu")
    return dirs, root / "report", tables


def test_compare_writes_whole_tables_and_each_runs_own_rows(compared):
    dirs, out, tables = compared
    n = len(dirs)
    sim = pd.read_parquet(out / "comparisons" / "compare_similarity.parquet")
    n_var = sim["variable"].nunique()
    assert n_var == len(DAS["counting"]["das.variables"].split(","))  # every one das aligned
    assert len(sim) == len(tables["compare_similarity"]) == n_var * n * n * 2  # 2 measures, k=2
    assert {"variable", "run", "other_run", "checkpoint", "other_checkpoint", "measure", "value",
            "baseline"} <= set(sim.columns)
    diag = sim[(sim["run"] == sim["other_run"]) & (sim["measure"] == "cka")]
    assert diag["value"].to_numpy() == pytest.approx(1.0, abs=1e-6)  # a run with itself
    stitch = tables["compare_stitching"]
    assert len(stitch) == n_var * n * n and stitch["n_changed"].gt(0).all()
    assert (stitch["n_tested"] <= stitch["n_changed"]).all()  # B's tested pairs: changed ones
    for d in dirs:
        own = pd.read_parquet(d / "analyses" / "compare" / "compare_stitching.parquet")
        assert set(own["run"]) == {str(d)} and len(own) == n_var * n
    geo = tables["compare_geometry"]
    assert set(geo["run"]) == {str(d) for d in dirs} and geo["held_out"].any()


@pytest.fixture(scope="module")
def report(compared):
    return build_report(load_runs(compared[0]))


@pytest.mark.parametrize("prefix,columns", [
    ("counting-compare-similarity-", ("run", "other_run")),
    ("counting-compare-geometry-", ("run",)),
    ("counting-compare-stitching-", ("run", "other_run")),
])
def test_comparison_charts_have_every_run_and_every_field(report, compared, prefix, columns):
    labels = {display_label(r) for r in load_runs(compared[0])}  # smoke runs: marked if < 0.9
    assert {lab.split(" (")[0] for lab in labels} == COUNTING_LABELS
    figs = [f for f in report.figures if f.key.startswith(prefix)]
    assert figs, sorted(f.key for f in report.figures)
    for fig in figs:
        assert problems(fig.spec()) == [], fig.key
        assert layout_problems(fig) == []  # half the page wide, every colour with a legend
        rows = chart_rows(fig)
        for c in columns:
            assert {r[c] for r in rows} == labels, (fig.key, c)


def test_a_run_that_has_not_learnt_its_task_is_marked_in_every_comparison(compared):
    runs = load_runs(compared[0])
    for run, acc in zip(runs, (0.99, 0.5, 0.9, 0.95)):
        run.summary["test_accuracy"] = acc
    report = build_report(runs)
    for prefix in ("counting-compare-similarity-", "counting-compare-geometry-",
                   "counting-compare-stitching-"):
        fig = next(f for f in report.figures if f.key.startswith(prefix))
        assert {r["run"] for r in chart_rows(fig)} == {
            "gru s0", "gru s1 (not learnt, acc 0.50)", "lstm s0", "rope2 s0"}, prefix
        assert 'marked "not learnt" stay below 90% test accuracy' in fig.caption
    for run in runs:
        run.summary["test_accuracy"] = 1.0
    fig = next(f for f in build_report(runs).figures
               if f.key.startswith("counting-compare-stitching-"))
    assert "not learnt" not in fig.caption


def test_runs_named_by_relative_paths_are_found_from_another_directory(compared, tmp_path,
                                                                      monkeypatch):
    """A sweep compares its runs by the paths it was given (`runs/...`, relative to where it
    ran); a report made from another directory still finds every run's rows."""
    from study.claims.cross import cross_table
    dirs, _, _ = compared
    runs = load_runs(dirs)
    for r in runs:
        t = r.tables["compare_similarity"]
        r.tables["compare_similarity"] = t.assign(
            run=t["run"].map(lambda p: f"runs/{Path(p).name}"),
            other_run=t["other_run"].map(lambda p: f"runs/{Path(p).name}"))
    monkeypatch.chdir(tmp_path)  # where runs/<name> does not exist
    table = cross_table(runs, "compare_similarity")
    assert table is not None and set(table["run"]) == {display_label(r) for r in runs}


def test_a_report_of_some_runs_drops_comparisons_with_the_others(compared):
    dirs = compared[0]
    report = build_report(load_runs(dirs[:2]))
    fig = next(f for f in report.figures if f.key.startswith("counting-compare-stitching-"))
    assert {r["other_run"].split(" (")[0] for r in chart_rows(fig)} == {"gru s0", "gru s1"}


@pytest.fixture(scope="module")
def two_transformers(smoke_runs, tmp_path_factory):
    """The binding rope2 run and a copy posing as another seed: circuits in both."""
    src = next(p for p in smoke_runs if p.name.startswith("binding"))
    root = tmp_path_factory.mktemp("roles")
    a = shutil.copytree(src, root / "a", ignore=shutil.ignore_patterns("checkpoints", "report*"))
    b = shutil.copytree(src, root / "b", ignore=shutil.ignore_patterns("checkpoints", "report*"))
    cfg = json.loads((b / "config.json").read_text())
    (b / "config.json").write_text(json.dumps({**cfg, "seed": 7}))
    return load_runs([a, b])


def test_circuit_roles_put_heads_in_rows_and_runs_in_columns(two_transformers):
    report = build_report(two_transformers)
    fig = next(f for f in report.figures if f.key == "binding-circuit-roles")
    spec = fig.spec()
    assert problems(spec) == []
    rows = chart_rows(fig)
    assert {r["run"] for r in rows} == {"rope2 s0", "rope2 s7"}
    scores = {r["score"] for r in rows}
    assert {"prev_token", "induction"} <= scores
    assert any(s.startswith("ablation drop: ") for s in scores)
    assert all(r["head_label"].count(".H") == 1 for r in rows)  # heads, not layers
    layer = spec["spec"]["layer"][0]["encoding"]
    assert layer["x"]["field"] == "column" and layer["y"]["field"] == "head_label"
    assert all(r["column"].startswith(r["run"] + " (acc ") for r in rows)


def test_the_verdict_links_to_the_comparisons_of_its_variables(report):
    """Every link under the verdict table leads to a figure of the report."""
    from study.reports.html import render
    figs = {f.key: f for t in report.tasks for s in t.sections for f in s.figures}
    verdict = figs["counting-verdict"]
    assert verdict.links and all(key in figs for _, key in verdict.links)
    assert {key.split("-compare-")[1].split("-")[0] for _, key in verdict.links} == {
        "similarity", "geometry", "stitching"}
    html = render(report)
    assert all(f'href="#{key}"' in html and f'id="{key}"' in html for _, key in verdict.links)


def test_each_comparison_names_the_site_each_run_was_read_at(report, compared):
    """Recurrent and transformer runs are read at different sites (`compare.site`): every
    comparison's caption says which, as the table's `site` column has it."""
    sites = {Path(r).name: s for r, s in
             compared[2]["compare_similarity"][["run", "site"]].drop_duplicates().to_numpy()}
    labels = {Path(str(r.path)).name: display_label(r) for r in load_runs(compared[0])}
    assert len(set(sites.values())) > 1  # the state and a residual stream
    for prefix in ("counting-compare-similarity-", "counting-compare-geometry-",
                   "counting-compare-stitching-"):
        fig = next(f for f in report.figures if f.key.startswith(prefix))
        said = fig.caption.split("Sites read: ")[1]  # "SITE in RUN, RUN; SITE in RUN."
        for site in set(sites.values()):
            runs = said.split(f"{site} in ")[1]
            for other in set(sites.values()) - {site}:
                runs = runs.split(f"; {other} in ")[0]
            for name, at in sites.items():
                assert (labels[name] in runs) == (at == site), (prefix, site, fig.caption)


def test_with_many_runs_the_stitching_table_gives_architecture_pairs():
    """Past six runs the table under the matrices gives each pair of architectures, the mean
    over its pairs of runs with a run and itself left out (15 runs make 225 rows otherwise)."""
    from study.reports.sections.compare_stitching import _table
    runs = [(m, f"{m} s{s}") for m in ("gru", "lstm") for s in range(4)]
    rows = [dict(run=a, other_run=b, model=ma, other_model=mb, k=4,
                 iia=1.0 if a == b else (0.9 if ma == mb else 0.5), own_iia=0.95,
                 shuffled_map_iia=0.1, random_subspace_iia=0.0, fit_r2=0.9, n_changed=500,
                 n_tested=480) for ma, a in runs for mb, b in runs]
    table, by_pair = _table(pd.DataFrame(rows))
    assert by_pair and len(table) == 4
    got = {(r["A"], r["B"]): (r["run pairs"], r["stitched IIA"]) for _, r in table.iterrows()}
    assert got == {("gru", "gru"): (12, 0.9), ("gru", "lstm"): (16, 0.5),
                   ("lstm", "gru"): (16, 0.5), ("lstm", "lstm"): (12, 0.9)}
    few, by_pair = _table(pd.DataFrame(rows[:36]))  # runs 0-5 as A: every pair listed
    assert not by_pair and len(few) == 36


def test_the_architecture_means_leave_out_runs_that_did_not_learn():
    """A run below the learnt accuracy has no task variable: its pairs are counted as left out
    and its stitching scores do not enter its architectures' means."""
    from study.reports.sections.compare_stitching import _table
    runs = [(m, f"{m} s{s}") for m in ("gru", "lstm") for s in range(4)]
    failed = "lstm s3"  # stitches at 0.0 into and out of everything
    rows = [dict(run=a, other_run=b, model=ma, other_model=mb, k=4,
                 iia=0.0 if failed in (a, b) else (0.9 if ma == mb else 0.5), own_iia=0.95,
                 shuffled_map_iia=0.1, random_subspace_iia=0.0, fit_r2=0.9, n_changed=500,
                 n_tested=480, run_learnt=a != failed, other_run_learnt=b != failed)
            for ma, a in runs for mb, b in runs]
    table, by_pair = _table(pd.DataFrame(rows))
    got = {(r["A"], r["B"]): (r["run pairs"], r["left out (not learnt)"], r["stitched IIA"],
                              r["range"]) for _, r in table.iterrows()}
    assert got == {("gru", "gru"): (12, 0, 0.9, "0.90–0.90"),
                   ("gru", "lstm"): (12, 4, 0.5, "0.50–0.50"),
                   ("lstm", "gru"): (12, 4, 0.5, "0.50–0.50"),
                   ("lstm", "lstm"): (6, 6, 0.9, "0.90–0.90")}
    none = [{**r, "run_learnt": r["model"] == "gru", "other_run_learnt": r["other_model"] == "gru"}
            for r in rows]  # no LSTM learnt
    table, _ = _table(pd.DataFrame(none))
    row = table[(table["A"] == "lstm") & (table["B"] == "lstm")].iloc[0]
    assert row["run pairs"] == 0 and row["left out (not learnt)"] == 12
    assert pd.isna(row["stitched IIA"]) and row["range"] == "no pair of runs that both learnt"

