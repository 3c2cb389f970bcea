"""`python -m study gpu-check`: the GPU node check, run here on the CPU in quick mode (every
item tiny), into a fresh folder; an item that fails or hangs is one line of the summary and
the other items still run; bad settings are refused before anything is written."""
from __future__ import annotations

import contextlib
import io
import re
import sys
import tarfile
import time
from pathlib import Path

import pytest

from study.checks import gpu_check, gpu_check_grid, gpu_check_items, gpu_check_summary
from study.cli import main
from study.core import registry
from study.run.preflight import nvidia_driver_loaded
from tests.conftest import project_entries


@pytest.fixture(scope="module")
def quick_check(tmp_path_factory):
    """(exit status, what it printed, OUT) of the quick check on the CPU."""
    out = tmp_path_factory.mktemp("gpu-check") / "out"
    printed = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        code = main(["gpu-check", f"out={out}", "device=cpu", "quick=true"])
    print(f"quick gpu-check on the CPU: {time.perf_counter() - t0:.0f} s")
    return code, printed.getvalue(), out


@pytest.mark.slow  # the whole quick check on the CPU: one to two minutes
def test_the_quick_check_runs_every_item_on_the_cpu_and_passes(quick_check):
    code, printed, out = quick_check
    summary = (out / gpu_check.SUMMARY).read_text()
    assert code == 0, summary
    assert summary.startswith(f"# gpu-check: all {len(gpu_check.ITEM_NAMES)} items passed")
    for name in gpu_check.ITEM_NAMES:
        assert re.search(rf"^\| {re.escape(name)} \| pass \| [\d.]+ s \|", summary, re.M), name
        # one line as it starts, one as it ends, with its time
        assert re.search(rf"^\[\d/\d\] {re.escape(name)}: started", printed, re.M), name
        assert re.search(rf"^\[\d/\d\] {re.escape(name)}: passed in [\d.]+ s$", printed, re.M), name
    assert "## Failures" not in summary
    assert re.search(r"^- torch: \d", summary, re.M) and "- GPU: none visible" in summary
    assert "## bench train" in summary and "| variant |" in summary and "## bench das" in summary
    assert re.search(r"^\| binding × gpt12 \| .* \| [\d.,]+ \|", summary, re.M)
    assert "final accuracy per pool" in summary and "| var2_heldout_allowed |" in summary
    log = (out / gpu_check.LOG).read_text()
    for name in gpu_check.ITEM_NAMES:
        assert f"===== {name}: passed" in log
    work = Path(re.search(r"runs in (\S+) \(removed at the end\)", printed).group(1))
    assert not work.exists()  # the temporary work folder (with the weights) is gone


@pytest.mark.slow  # reads the quick check above
def test_the_check_writes_at_most_eight_files_and_archives_no_weights(quick_check):
    _, _, out = quick_check
    written = [p for p in out.rglob("*") if p.is_file()]
    assert len(written) <= gpu_check_items.MAX_FILES and {p.name for p in written} == {
        gpu_check.SUMMARY, gpu_check.LOG, gpu_check.ARCHIVE}
    assert all(p.stat().st_size < gpu_check_items.MAX_FILE_BYTES for p in written)
    with tarfile.open(out / gpu_check.ARCHIVE) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    weights = [m.name for m in members if m.isfile() and (
        m.name.endswith((".pt", "model.safetensors"))
        or ("checkpoints" in Path(m.name).parts and not m.name.endswith("/meta.json")))]
    assert not weights, weights[:5]
    assert any("/checkpoints/" in n and n.endswith("meta.json") for n in names)
    for what in ("config.json", "status.json", "metrics.parquet", "report.html",
                 "probes.parquet"):
        assert any(n.endswith("/" + what) for n in names), what
    # every grid combination's run directory, and the demo's study report
    for task, model, _ in gpu_check_grid.grid_combos(quick=True):
        if task in project_entries("task") and model in project_entries("model"):
            assert f"grid/{task}-{model}/status.json" in names
    assert "demo/runs/study-demo/index.html" in names


def _item(name, code, budget=60):
    return gpu_check.Item(name, ((sys.executable, "-c", code),), budget)


def _check_with(items, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "plan", lambda opts, work: items)
    monkeypatch.setattr(gpu_check, "machine_info", lambda env: {"host": "here", "git": "x"})
    code = main(["gpu-check", f"out={tmp_path / 'out'}", "device=cpu", "quick=true"])
    return code, (tmp_path / "out" / gpu_check.SUMMARY).read_text(), capsys.readouterr().out


def test_a_failing_item_is_one_line_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    crash = ("import sys; print('working'); "
             "print('Traceback (most recent call last):', file=sys.stderr); "
             "print('RuntimeError: CUDA error: device-side assert triggered', file=sys.stderr); "
             "sys.exit(1)")
    items = [_item("first", "print('fine')"), _item("broken", crash),
             _item("last", "print('still ran')")]
    code, summary, printed = _check_with(items, tmp_path, monkeypatch, capsys)
    assert code == 1
    assert summary.startswith("# gpu-check: 2 of 3 items passed")
    failures = summary.split("## Failures\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert failures == ["- broken: RuntimeError: CUDA error: device-side assert triggered "
                        "(exit status 1)"]
    assert "| first | pass |" in summary and "| last | pass |" in summary
    assert re.search(r"^\[2/3\] broken: FAILED in [\d.]+ s: RuntimeError: CUDA error", printed, re.M)
    assert "still ran" in (tmp_path / "out" / gpu_check.LOG).read_text()


def test_an_item_past_its_budget_is_stopped_and_the_check_goes_on(tmp_path, monkeypatch, capsys):
    hang = "import time; print('waiting for ever', flush=True); time.sleep(600)"
    items = [_item("hangs", hang, budget=2), _item("after", "print('ran')")]
    t0 = time.perf_counter()
    code, summary, _ = _check_with(items, tmp_path, monkeypatch, capsys)
    assert time.perf_counter() - t0 < 30
    assert code == 1
    assert "- hangs: timed out after 2 s (its budget); its last line: waiting for ever" in summary
    assert "| after | pass |" in summary


@pytest.mark.parametrize("args,message", [
    ([], "out= is required"),
    (["out={tmp}/out", "devices=cpu"], "unknown key 'devices' for gpu-check"),
    (["out={tmp}/out", "device=tpu"], "device='tpu': choose from cuda, cpu"),
    (["out={tmp}/out", "device=cpu", "quick=perhaps"], "quick='perhaps'"),
    (["out={tmp}/out", "device=cpu", "scale=huge"], "scale='huge' is not a scale"),
    (["out={tmp}/out", "device=cpu", "only=grid,nonsense"], "only='grid,nonsense': choose among"),
    (["out={tmp}/full", "device=cpu"], "already holds files"),
    (["out={tmp}/full/a.txt", "device=cpu"], "is a file, not a folder"),
    (["out={tmp}/full/a.txt/out", "device=cpu"], "cannot create it"),
    (["out={tmp}/out", "device=cpu", "work={tmp}/out/work"], "is inside out="),
])
def test_bad_settings_are_refused_in_one_line_and_nothing_is_written(args, message, tmp_path,
                                                                     capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a.txt").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    assert main(["gpu-check", *(a.format(tmp=tmp_path) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.skipif(nvidia_driver_loaded(), reason="needs a machine without an NVIDIA driver")
def test_cuda_without_a_driver_is_refused_naming_the_cpu_check(tmp_path, capsys):
    assert main(["gpu-check", f"out={tmp_path / 'out'}"]) == 2
    assert "device=cpu quick=true" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_grid_is_every_task_model_and_applicable_analysis_from_the_registries(monkeypatch):
    tasks, models = project_entries("task"), project_entries("model")
    analyses = project_entries("analysis")
    ours = {"task": tasks, "model": models, "analysis": analyses}
    monkeypatch.setattr(registry, "entries", ours.__getitem__)  # as the check's own process sees it
    full = gpu_check_grid.grid_combos(quick=False)
    assert {(t, m) for t, m, _ in full} == {(t, m) for t in tasks for m in models}
    for _, model, names in full:
        assert set(names) == {a for a, e in analyses.items()
                              if e.requires <= models[model].capabilities}
    quick = gpu_check_grid.grid_combos(quick=True)
    assert {m for _, m, _ in quick} == set(models) and {t for t, _, _ in quick} == set(tasks)
    assert {a for *_, names in quick for a in names} == set(analyses)


@pytest.mark.parametrize("text,line", [
    ("collected\nFAILED tests/a.py::test_x - AssertionError: no\n1 failed, 3 passed in 2s\n",
     "FAILED tests/a.py::test_x - AssertionError: no"),
    ("Traceback (most recent call last):\n  File \"x\"\nValueError: bad shape\n",
     "ValueError: bad shape"),
    ("running\nerror: 1 of 3 runs failed: runs/a (CUDA error)\n", "error: 1 of 3 runs failed: runs/a (CUDA error)"),
    ("torch.compile    NO: InductorError: no C++ compiler\ndoctor: some checks failed (above)\n",
     "torch.compile NO: InductorError: no C++ compiler"),
    ("just output\nthe end\n", "the end"),
])
def test_the_line_naming_a_failure(text, line):
    assert gpu_check.last_error_line(text) == line


def test_the_gpu_check_fits_eight_minutes_of_one_gpu_by_its_budgets(tmp_path):
    """On a GPU (not quick) the groups' budgets, side by side where items share the machine,
    add up to at most 480 s: the check ends within one 10-minute job."""
    opts = gpu_check.Options(tmp_path / "out", device="cuda")
    items = gpu_check.plan(opts, tmp_path / "work")
    assert [i.name for i in items] == list(gpu_check.ITEM_NAMES)
    wall = gpu_check.wall_budget(items)
    assert wall <= gpu_check_items.WALL_S == 480
    assert wall < sum(i.budget_s for i in items)  # some items run side by side
    # every training item is bounded so that it can end within its budget
    cmd = {i.name: " ".join(i.commands[-1]) for i in items}
    assert "runtime.max_minutes=" in cmd["binding-paper"] and "runtime.max_minutes=" in cmd["assign_add-paper"]
    assert "runtime.max_minutes=" in cmd["demo"]


def test_the_archive_stops_short_of_its_cap_small_files_first_and_names_what_is_left(tmp_path):
    import os
    work = tmp_path / "work"
    runs = work / "grid" / "run"
    runs.mkdir(parents=True)
    for i in range(30):  # small tables: all kept
        (runs / f"table{i}.json").write_text('{"x": %d}' % i)
    for i in range(6):  # incompressible 400 KiB files: only some fit under 1.5 MiB
        (runs / f"big{i}.bin").write_bytes(os.urandom(400 << 10))
    (runs / "huge.bin").write_bytes(os.urandom(800 << 10))  # over the member cap
    (work / "grid" / "run" / "checkpoints" / "step-1").mkdir(parents=True)
    (runs / "checkpoints" / "step-1" / "model.safetensors").write_bytes(b"w" * 100)
    (runs / "analyses" / "das" / "partial").mkdir(parents=True)  # DAS training snapshots
    (runs / "analyses" / "das" / "partial" / "0123.pt").write_bytes(b"s" * 100)
    (runs / "analyses" / "das" / "das.parquet").write_bytes(b"t" * 100)
    archive = tmp_path / "runs.tar.gz"
    assert gpu_check_summary._pack(work, archive, limit=int(1.5 * 2**20),
                                   member_limit=600 << 10) is None
    assert archive.stat().st_size < 1.5 * 2**20
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        note = tar.extractfile("LEFT_OUT.txt").read().decode()
    assert all(f"grid/run/table{i}.json" in names for i in range(30))
    kept = [n for n in names if "/big" in n]
    assert 0 < len(kept) < 6
    assert "grid/run/huge.bin" in note and "grid/run/huge.bin" not in names
    assert all(f"grid/run/big{i}.bin" in note for i in range(6) if f"grid/run/big{i}.bin" not in names)
    assert not [n for n in names if n.endswith("model.safetensors") or "/partial/" in n]
    assert "grid/run/analyses/das/das.parquet" in names


def test_the_log_keeps_each_items_last_lines_past_its_cap():
    text = "".join(f"line {i}\n" for i in range(100_000))
    cut = gpu_check_summary._tail(text, 10_000)
    assert len(cut.encode()) < 10_300 and cut.endswith("line 99999\n")
    assert cut.startswith("[... the first ") and "\nline " in cut
    assert gpu_check_summary._tail("short", 10_000) == "short\n"
