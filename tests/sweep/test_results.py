"""Results as data: a study's tables and manifest, the docs' tables made from them, and the
rerun that checks them (`python -m study results | results-docs | reproduce`)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from study.sweep import docs_tables
from study.sweep.agreement import compare_table
from study.sweep.result_tables import MANIFEST, RESULTS_ROOT, TABLES, TOLERANCES, read_table, write_results
from tests.conftest import ROOT, run_cli


def _train(path, seed=0):
    from study.core.registry import get
    from study.core.rundir import RunDir
    from study.run.config import train_config
    from study.train.loop import train
    task_entry, model = get("task", "counting"), get("model", "gru")
    cfg = train_config(task_entry, "smoke", {"steps": 40, "checkpoints": 3})
    task = task_entry.obj(task_entry.make_config("smoke"))
    train(RunDir(path), task, model, model.make_config("smoke"), cfg, seed)


def _final(path):
    from study.train import checkpoint as ckpt
    step = ckpt.list_checkpoints(path)[-1]
    return load_file(str(ckpt.checkpoints_dir(path) / ckpt.dir_name(step) / ckpt.WEIGHTS))


def test_two_trainings_with_the_same_seed_give_identical_weights(tmp_path):
    """On one CPU thread and one build, training is bit-identical: what `reproduce` expects
    to get back exactly."""
    _train(tmp_path / "a")
    _train(tmp_path / "b")
    _train(tmp_path / "c", seed=1)
    a, b, c = _final(tmp_path / "a"), _final(tmp_path / "b"), _final(tmp_path / "c")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)  # the seed decides the network
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / "metrics.parquet"),
                                  pd.read_parquet(tmp_path / "b" / "metrics.parquet"),
                                  check_exact=True)


@pytest.fixture
def two_runs(trained_runs, tmp_path):
    """A record of two finished runs (as sweep.json holds), one of them stopped by the guard."""
    runs = []
    for model in ("gru", "lstm"):
        copy = tmp_path / model
        shutil.copytree(trained_runs(model), copy)
        runs.append(copy)
    summary = json.loads((runs[1] / "summary.json").read_text())
    (runs[1] / "summary.json").write_text(json.dumps({**summary, "time_limited": True,
                                                      "stopped_early": True}))
    return {"name": "two", "argv": ["sweep", "study=examples/smoke.toml"], "cwd": str(ROOT),
            "runs": [{"path": str(p), "args": []} for p in runs]}


def test_the_result_folder_holds_every_table_and_marks_the_guarded_run(two_runs, tmp_path):
    out = write_results(two_runs, tmp_path / "res")
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{t}.csv" for t in TABLES] + [MANIFEST])
    summary = read_table(out, "summary")
    assert dict(zip(summary["run"], summary["ended"])) == {"gru s0": "all steps", "lstm s0": "time guard"}
    for name in TABLES:
        df = read_table(out, name)
        assert "time_limited" in df.columns, name
        if not len(df):
            continue
        if "run" in df.columns:  # a table of runs: the guarded run's rows
            rows = df[df["run"] == "lstm s0"]
        else:  # a table of architectures: every row the guarded run's family enters
            rows = df[(df["model"] == "lstm") | (df.get("other_model") == "lstm")]
        assert rows["time_limited"].all(), name
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["command"] == "python -m study sweep study=examples/smoke.toml"
    assert manifest["time_limited"] == ["lstm s0"]
    assert manifest["build"]["torch"] == torch.__version__ and manifest["build"]["numpy"] == np.__version__
    assert all(r["wall_time_s"] > 0 and r["config"]["model"] for r in manifest["runs"])
    assert sum(p.stat().st_size for p in out.iterdir()) < 300_000


def test_an_unfinished_run_is_no_result(two_runs, tmp_path):
    from study.core.errors import UsageError
    status = Path(two_runs["runs"][0]["path"]) / "status.json"
    status.write_text(json.dumps({**json.loads(status.read_text()), "status": "running"}))
    with pytest.raises(UsageError, match="not finished"):
        write_results(two_runs, tmp_path / "res")
    assert not (tmp_path / "res").exists()


def _frame(iia=(0.9, 0.5), k=(1, 2)):
    return pd.DataFrame({"run": ["gru s0", "lstm s0"], "k": list(k), "iia": list(iia)})


def test_compare_table_is_exact_on_the_same_build_and_within_tolerance_on_another():
    tol = {"iia*": (0.05, 0)}
    assert compare_table(_frame(), _frame(), tol, exact=True) == (True, "identical")
    moved = _frame(iia=(0.93, 0.5))
    assert not compare_table(_frame(), moved, tol, exact=True)[0]
    ok, what = compare_table(_frame(), moved, tol, exact=False)
    assert ok and what.startswith("within tolerance") and "iia" in what
    assert not compare_table(_frame(), _frame(iia=(0.8, 0.5)), tol, exact=False)[0]
    # keys never get a tolerance: another k, or rows in another order, is told apart
    assert not compare_table(_frame(), _frame(k=(1, 4)), tol, exact=False)[0]
    assert compare_table(_frame(), _frame().iloc[::-1], tol, exact=True)[0]


def test_every_table_has_a_tolerance_for_its_measured_numbers():
    assert set(TOLERANCES) == set(TABLES)


# --- the docs' tables -------------------------------------------------------------------

def test_the_docs_tables_are_what_the_committed_data_gives():
    pages = docs_tables.pages()
    assert pages, "no page holds a results table"
    for page in pages:
        text = page.read_text()
        assert docs_tables.rewrite(text, where=str(page)) == text, (
            f"{page}: a results table differs from its data; run python -m study results-docs")


def _a_docs_page() -> Path:
    return next(p for p in docs_tables.pages() if p.parent == docs_tables.DOCS)


def test_a_number_edited_by_hand_is_caught(tmp_path, monkeypatch, capsys):
    page = _a_docs_page()
    text = page.read_text()
    block = docs_tables.BLOCK.search(text)
    body = block.group("body")
    table_line = next(line for line in body.splitlines() if line.startswith("| ") and
                      any(ch.isdigit() for ch in line.split("|")[-2]))
    edited_line = table_line[:-2] + ("1" if table_line[-3] != "1" else "2") + " |"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / page.name).write_text(text.replace(table_line, edited_line, 1))
    monkeypatch.setattr(docs_tables, "DOCS", docs)
    assert docs_tables.cmd_results_docs(["check=true"]) == 1
    assert "differs from its data" in capsys.readouterr().out
    assert docs_tables.cmd_results_docs([]) == 0  # rewritten from the data
    assert (docs / page.name).read_text() == text


@pytest.mark.parametrize("edit, said", [
    (lambda t: t.replace("<!-- /results -->", "", 1), "has no closing"),
    (lambda t: re.sub("^<!-- results:", "<!-- result:", t, count=1, flags=re.M),
     "misspelt results marker"),
    (lambda t: re.sub("^<!-- results:", "<!--results:", t, count=1, flags=re.M),
     "misspelt results marker"),
    (lambda t: t + "\n<!-- /results -->\n", "closes no results block"),
])
def test_an_unpaired_or_misspelt_marker_is_an_error(tmp_path, monkeypatch, capsys, edit, said):
    from study.cli import main
    page = _a_docs_page()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / page.name).write_text(edit(page.read_text()))
    monkeypatch.setattr(docs_tables, "DOCS", docs)
    for args in (["check=true"], []):
        assert main(["results-docs", *args]) == 2
        err = capsys.readouterr().err
        assert said in err and f"{docs / page.name}:" in err and err.count("\n") == 1, err


def test_a_results_block_names_its_folder():
    for page in docs_tables.pages():
        for m in docs_tables.BLOCK.finditer(page.read_text()):
            folder, table, _ = docs_tables.parse_spec(m.group("spec"))
            if table == "findings":  # each finding links to its folder
                lines = m.group("body").splitlines()
                assert lines and all(f"[results/{folder}](" in line for line in lines)
            else:
                assert f"results/{folder}/{table}.csv" in m.group("body")


def test_the_readme_says_what_was_found_in_at_most_six_lines_from_the_folders(tmp_path):
    """The README's "What it found" box is generated from the result folders (a finding
    edited by hand is caught as a table is) and holds at most six findings."""
    readme = docs_tables.DOCS.parent / "README.md"
    assert readme in docs_tables.pages()
    text = readme.read_text()
    box = text.split("## What it found", 1)[1].split("\n## ", 1)[0]
    findings = [line for line in box.splitlines() if line.startswith("- **")]
    assert 1 <= len(findings) <= 6
    assert all(re.search(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", f) for f in findings)
    edited = text.replace(findings[0], findings[0].replace("0.", "0.1", 1), 1)
    assert docs_tables.rewrite(edited, where=str(readme)) == text


# --- reproduce ----------------------------------------------------------------------------

def _smoke_folder() -> Path:
    found = sorted(RESULTS_ROOT.glob("smoke-*"))
    assert found, "results/ holds no smoke-scale result folder"
    return found[-1]


@pytest.mark.slow  # the smoke study trained and analysed again: minutes
def test_reproduce_on_another_numerical_path_gets_every_claim_back(tmp_path):
    """The smoke study rerun with torch's CPU kernels at another SIMD level than the committed
    build's (as another CPU would run them: sums round differently from the first update on)
    reproduces within the manifest's tolerance."""
    import os
    folder = _smoke_folder()
    build = json.loads((folder / MANIFEST).read_text())["build"]
    if build.get("cpu_capability") is None:
        pytest.skip(f"{folder.name} was made before the SIMD level was recorded")
    if build["cpu_capability"] == torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("the committed build and this CPU run at SIMD level DEFAULT: no other to take")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    r = run_cli("reproduce", str(folder), f"work={tmp_path / 'work'}", timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "build: another than the committed one's" in r.stdout
    lines = r.stdout.splitlines()
    held = json.loads((folder / MANIFEST).read_text())["tables"]  # a later table: not compared
    assert held and set(held) <= set(TABLES)
    for name in held:
        verdict = next(line for line in lines if line.startswith(f"{name}: "))
        assert verdict.split(": ", 1)[1].startswith(("identical", "within tolerance")), verdict
    assert "reproduced: yes (within tolerance)" in r.stdout


def test_reproduce_refuses_a_folder_without_a_manifest(tmp_path):
    r = run_cli("reproduce", str(tmp_path))
    assert r.returncode == 2 and "holds no manifest.json" in r.stderr


def test_the_comparisons_table_keeps_each_pair_of_runs_at_its_matched_k(tmp_path):
    """The report shows every k; the result folder keeps the k each pair is judged at (a
    pair's `matched_k`), so a study of many runs stays a small table."""
    from study.core.tables import COMPARE_SIMILARITY, COMPARE_STITCHING
    from study.claims.results import comparisons_table
    pairs = [("a", "b", 4), ("b", "a", 8)]
    common = lambda run, other, k, matched: dict(  # noqa: E731
        variable="v", run=run, other_run=other, model="m", other_model="m", site="s",
        other_site="s", alignment="oaf", k=k, matched_k=matched)
    sim = [dict(common(a, b, k, m), measure="cka", value=0.5, baseline=0.0, random_subspace=0.1)
           for a, b, m in pairs for k in (4, 8, 16)]
    st = [dict(common(a, b, k, m), iia=0.9, own_iia=0.95, shuffled_map_iia=0.2,
               random_subspace_iia=0.0) for a, b, m in pairs for k in (4, 8, 16)]
    COMPARE_SIMILARITY.frame(sim).to_parquet(tmp_path / f"{COMPARE_SIMILARITY.name}.parquet")
    COMPARE_STITCHING.frame(st).to_parquet(tmp_path / f"{COMPARE_STITCHING.name}.parquet")
    table = comparisons_table([], tmp_path)
    kept = table.groupby(["run", "other_run"])["k"].agg(set).to_dict()
    assert kept == {("a", "b"): {4}, ("b", "a"): {8}}
    assert set(table["measure"]) == {"cka", "stitched_iia", "shuffled_map_iia"}
