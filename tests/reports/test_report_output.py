"""What a report writes: an HTML page safe against hostile run names, Markdown whose every
image is a real PNG, each run's own report.html, and clear errors for damaged run directories."""
import json
import re
import shutil

import pytest

from study.reports.build import build_report
from study.reports.html import render, spec_json
from study.claims.runs import load_run, load_runs
from study.reports.write import write_report
from study.core.errors import UsageError

PNG = b"\x89PNG\r\n\x1a\n"
SPEC_SCRIPT = re.compile(r'<script type="application/json" class="vl-spec" data-for="([^"]*)">(.*?)</script>',
                         re.S)
HOSTILE = "<script>alert(1)</script>"


def copy_run(src, dst):
    """A run directory without its checkpoints and reports (all a report reads)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "report*"))
    return dst


def page_without_bundle(page: str) -> str:
    head, sep, _ = page.rpartition('<script type="module">')
    assert sep, "the page has no inlined Vega bundle"
    return head


# ----------------------------------------------------------------------------- size

def test_a_study_of_many_runs_renders_every_point_of_its_trajectories(tmp_path):
    """15 runs × 6 strata × 72 evaluations: more rows than altair's notebook guard (5,000)
    allows by default; the page still renders, with every row inlined."""
    import pandas as pd
    from pathlib import Path
    from study.claims.runs import RunTables, labelled

    steps = range(0, 7200, 100)
    strata = ["all", *(f"root_line={i}" for i in range(5))]
    runs = []
    for seed in range(15):
        metrics = pd.DataFrame([{"step": s, "split": "val", "stratum": st, "metric": "accuracy",
                                 "value": min(1.0, s / 7000)} for s in steps for st in strata])
        runs.append(RunTables(path=Path(f"r{seed}"), config={"task": "binding", "model": "gru",
                                                             "seed": seed},
                              summary={}, status="done", metrics=metrics, heuristics=None))
    report = build_report(labelled(runs))
    figure = next(f for f in report.figures if f.key.endswith("trajectory-root_line"))
    rows = sum(len(v) for v in figure.spec()["datasets"].values())
    assert rows >= 15 * len(strata) * len(steps) > 5000
    assert "trajectory-root_line" in render(report)


# ----------------------------------------------------------------------------- escaping

def test_spec_json_has_no_raw_markup_and_round_trips():
    spec = {"title": "</script><script>alert(1)</script>", "a&b": "x > y && y < z",
            "lines": "one\u2028two\u2029three", "data": [{"run": "<!-- gru s0 -->", "v": 0.5}]}
    text = spec_json(spec)
    for ch in "<>&\u2028\u2029":
        assert ch not in text
    assert json.loads(text) == spec


def test_hostile_run_names_and_cells_are_escaped_in_the_page(counting_runs, tmp_path):
    gru = next(p for p in counting_runs if p.name == "counting-gru-s0")
    # Same model and seed as gru s0, so its label carries the directory name.
    evil = copy_run(gru, tmp_path / "<script>alert(1)<")
    summary = json.loads((evil / "summary.json").read_text())
    summary["device"] = HOSTILE  # shown in the runs table
    (evil / "summary.json").write_text(json.dumps(summary))
    runs = load_runs([gru, evil])
    assert runs[0].label == "gru s0 (counting-gru-s0)"
    assert runs[1].label == "gru s0 (<script>alert(1)<)"
    report = build_report(runs)
    page = render(report)
    html_part = page_without_bundle(page)
    assert "<script>alert" not in html_part
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_part  # the device cell, escaped
    assert "&lt;script&gt;alert(1)&lt;" in html_part  # the run label / directory, escaped
    # The only script elements besides the bundle are the charts' JSON specs, one per chart.
    specs = SPEC_SCRIPT.findall(html_part)
    assert len(specs) == html_part.count("<script") == report.n_charts
    assert f'data-charts="{report.n_charts}"' in html_part
    labels = set()
    for key, text in specs:
        assert f'id="chart-{key}"' in html_part
        spec = json.loads(text)  # the hostile label survives, as data
        labels |= {row.get("run") for rows in spec["datasets"].values() for row in rows}
    assert "gru s0 (<script>alert(1)<)" in labels


# ----------------------------------------------------------------------------- markdown

def test_markdown_report_has_one_valid_png_per_chart_and_the_tables(smoke_runs, tmp_path):
    out = tmp_path / "out"
    index = write_report(smoke_runs, out, markdown=True)
    assert index == out / "index.html"
    n_charts = int(re.search(r'data-charts="(\d+)"', index.read_text()).group(1))
    md = (out / "report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\((figures/[^)]+)\)", md)
    assert len(images) == len(set(images)) == n_charts > 10
    for rel in images:
        assert rel.endswith(".png")
        data = (out / rel).read_bytes()
        assert data[:8] == PNG, rel
        assert len(data) > 1000, rel
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(
        rel.split("/", 1)[1] for rel in images)
    for heading in ("## Runs", "## Task: counting", "## Task: binding", "### Headline numbers"):
        assert heading in md
    tables = re.findall(r"^\|.*\|\n\|[-:| ]+\|$", md, re.M)  # header + separator rows
    assert len(tables) >= 5
    headline = md.split("### Headline numbers", 1)[1]
    for label in ("gru s0", "gru s1", "lstm s0", "rope2 s0"):
        assert f"| {label} " in headline


def test_write_report_without_markdown_writes_only_the_page(counting_runs, tmp_path):
    out = tmp_path / "nested" / "out"
    index = write_report(counting_runs[:2], out, markdown=False)
    assert index.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in out.iterdir()) == [".study-report", "index.html"]


def test_out_that_is_a_file_is_refused(counting_runs, tmp_path):
    f = tmp_path / "file"
    f.write_text("keep me")
    with pytest.raises(UsageError, match="not a directory"):
        write_report(counting_runs[:1], f)
    assert f.read_text() == "keep me"


# ----------------------------------------------------------------------------- run reports

def test_every_run_writes_its_own_report_after_its_analyses(smoke_runs):
    for run_dir in smoke_runs:
        page = (run_dir / "report.html").read_text()
        assert page.startswith("<!DOCTYPE html>")
        n = int(re.search(r'data-charts="(\d+)"', page).group(1))
        assert n > 0 and len(SPEC_SCRIPT.findall(page)) == n
        cfg = json.loads((run_dir / "config.json").read_text())
        assert f"{cfg['task']} × {cfg['model']}" in page
        tables = list((run_dir / "analyses").glob("*/*.parquet"))
        assert tables
        written = (run_dir / "report.html").stat().st_mtime
        assert all(t.stat().st_mtime <= written for t in tables)


# ----------------------------------------------------------------------------- loading

@pytest.mark.parametrize("damage", ["garbage", "truncated"])
@pytest.mark.parametrize("rel", ["analyses/das/das.parquet", "metrics.parquet", "heuristics.parquet"])
def test_damaged_parquet_is_a_usage_error_naming_the_file(counting_runs, tmp_path, rel, damage):
    run = copy_run(counting_runs[0], tmp_path / "run")
    f = run / rel
    data = f.read_bytes()
    f.write_bytes(b"not a parquet file" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(UsageError) as e:
        load_run(run)
    assert str(f) in str(e.value)
    assert "\n" not in str(e.value)


def test_damaged_config_is_a_usage_error_naming_the_file(counting_runs, tmp_path):
    run = copy_run(counting_runs[0], tmp_path / "run")
    (run / "config.json").write_text("{not json")
    with pytest.raises(UsageError, match=re.escape(str(run / "config.json"))):
        load_run(run)


def test_same_directory_twice_is_loaded_once(counting_runs):
    p = counting_runs[0]
    runs = load_runs([p, p.parent / ".." / p.parent.name / p.name])
    assert len(runs) == 1 and runs[0].label == "gru s0"


def test_final_keeps_only_the_latest_checkpoint(counting_runs, tmp_path):
    import pandas as pd
    run = copy_run(counting_runs[0], tmp_path / "run")
    das = pd.read_parquet(run / "analyses/das/das.parquet")
    old = das.assign(checkpoint=das["checkpoint"] - 5, iia=1.0)
    pd.concat([old, das]).to_parquet(run / "analyses/das/das.parquet")
    final = load_run(run).final("das")
    assert len(final) == len(das)
    assert (final["checkpoint"] == das["checkpoint"].max()).all()
    assert final["iia"].reset_index(drop=True).equals(das["iia"].reset_index(drop=True))
