"""The notebooks in examples/ are tutorials: stored with the outputs of an execution on the
smoke runs of examples/smoke.toml, opening with what they show and need, ending with a
figure, written against the public API only; and they still run, end to end, on those runs
(trained once for this file, each notebook in a fresh kernel, as `make notebooks` runs them).
`study.find_run`, the one way they get their runs, is checked here too."""
from __future__ import annotations

import ast
import importlib.util
import json
import re

import nbformat
import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

import study
from study.core.errors import UsageError
from study.core.tables import required_files
from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
FIGURE = ("image/png", "image/svg+xml")


def _executor():
    """examples/execute.py, the script `make notebooks` runs (not a package module)."""
    spec = importlib.util.spec_from_file_location("examples_execute", ROOT / "examples" / "execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_cells(book):
    return [c for c in book.cells if c.cell_type == "code"]


def figure_of(cell) -> str | None:
    """The image a code cell displayed (its mime type), else None."""
    for out in cell.outputs:
        for mime in FIGURE:
            if mime in out.get("data", {}):
                return mime
    return None


def test_the_examples_are_the_four_notebooks_the_readme_names():
    names = [p.name for p in NOTEBOOKS]
    assert names == ["01_open_a_run.ipynb", "02_das_through_pyvene.ipynb",
                     "03_patch_one_site.ipynb", "04_compare_subspaces.ipynb"]
    readme = (ROOT / "README.md").read_text()
    assert all(f"examples/{n}" in readme for n in names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_is_a_tutorial_with_its_outputs(path):
    """What a reader opening the file sees: a title and what it needs, every cell's output
    (no error), the closing figure, and no per-execution noise; small enough to review."""
    assert path.stat().st_size < 1_000_000, f"{path.name}: {path.stat().st_size} bytes"
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    first = book.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), path.name
    assert "**Needs**" in first.source and "examples/smoke.toml" in first.source, path.name
    cells = code_cells(book)
    assert all(c.execution_count is not None for c in cells), f"{path.name}: unexecuted cells"
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), path.name
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"], path.name
    assert figure_of(cells[-1]), f"{path.name}: its last cell shows no figure"
    assert book.metadata == _executor().METADATA, path.name
    assert not [c for c in book.cells if "execution" in c.metadata], path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_uses_the_public_api_only(path):
    """Code cells import `study` and what it exports, nothing under it, and need no
    environment variable."""
    public = set(study.__all__)
    bad = []
    for cell in code_cells(nbformat.read(path, as_version=4)):
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [a.name for a in node.names if a.name.startswith("study.")]
            elif isinstance(node, ast.ImportFrom) and node.module == "study":
                bad += [f"from study import {a.name}" for a in node.names if a.name not in public]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("study."):
                bad.append(f"from {node.module} import ...")
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "study" and node.attr not in public):
                bad.append(f"study.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                bad.append(f"os.{node.attr}")
    assert not bad, f"{path.name}: {', '.join(bad)}"


PYTHON_MD = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
RUN_MAKERS = ("find_run", "open_run")


def _study_call(node, names) -> bool:
    """`study.NAME(...)` for NAME in names."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "study"
            and node.func.attr in names)


def notebook_names(source: str) -> set[str]:
    """What a notebook's code uses of the toolkit, as python.md writes it: `study.NAME`, and
    `.attr` for every attribute read off a run (`study.find_run`/`open_run`, an element of a
    list of them), off its `.config` and `.task`, off its pairs (`run.pairs(...)`), off an
    alignment it returns (`run.alignment(...)`) and off an intervenable (`run.intervenable`,
    `study.site_intervenable`, `study.load_intervenable`); and every name starting with `_` but a
    dunder."""
    tree = ast.parse(source)
    runs, lists, pairs, alignments, ivs = set(), set(), set(), set(), set()

    def is_run(node) -> bool:
        return ((isinstance(node, ast.Name) and node.id in runs)
                or (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                    and node.value.id in lists))

    def method_of_run(node, name) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == name and is_run(node.func.value))

    for _ in range(2):  # names bound from names bound earlier
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                target, value = node.targets[0], node.value
                if isinstance(target, ast.Name):
                    if _study_call(value, RUN_MAKERS):
                        runs.add(target.id)
                    elif (_study_call(value, ("open_runs",)) or isinstance(value, ast.ListComp)
                          and _study_call(value.elt, RUN_MAKERS)):
                        lists.add(target.id)
                    elif method_of_run(value, "pairs"):
                        pairs.add(target.id)
                    elif (method_of_run(value, "intervenable")
                          or _study_call(value, ("site_intervenable", "load_intervenable"))):
                        ivs.add(target.id)
                elif isinstance(target, ast.Tuple) and method_of_run(value, "alignment"):
                    alignments.add(target.elts[0].id)
            elif (isinstance(node, ast.For) and isinstance(node.iter, ast.Name)
                  and node.iter.id in lists and isinstance(node.target, ast.Name)):
                runs.add(node.target.id)
    used = set()
    for node in ast.walk(tree):
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if isinstance(name, str) and name.startswith("_") and not name.startswith("__"):
            used.add(name)
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id == "study":
            used.add(f"study.{node.attr}")
        elif (is_run(v) or (isinstance(v, ast.Attribute) and v.attr in ("config", "task")
                            and is_run(v.value))
              or (isinstance(v, ast.Name) and v.id in pairs | alignments | ivs)):
            used.add(f".{node.attr}")
    return used


def test_the_name_check_sees_internals():
    """The check below would catch what the notebooks once reached into."""
    found = notebook_names(
        'run = study.find_run(task="counting", model="gru")\n'
        'cfg = run.config.analysis_configs["patching"]\n'
        'runs = [study.find_run(task="counting", model=m) for m in ("gru", "lstm")]\n'
        'runs[0].task.fingerprint()\n'
        'p = run.pairs("x")\n'
        'p.strata\n'
        'iv = run.intervenable("x")\n'
        'list(iv.interventions.values())[0]._k\n'
        'study.new_alignment\n')
    assert {".analysis_configs", ".fingerprint", ".strata", ".interventions", "_k",
            "study.new_alignment", ".config", ".task", ".pairs"} <= found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_name_a_notebook_uses_is_public_and_in_python_md(path):
    """No name starting with `_`, and every `study.NAME` and every attribute of a run, its
    config, task, pairs and alignments that a notebook uses is documented in docs/python.md."""
    source = "\n".join(c.source for c in code_cells(nbformat.read(path, as_version=4)))
    used = notebook_names(source)
    private = sorted(n for n in used if n.startswith("_"))
    assert not private, f"{path.name} uses internals: {', '.join(private)}"
    missing = sorted(n for n in used if not re.search(re.escape(n) + r"\b", PYTHON_MD))
    assert not missing, f"{path.name} uses names docs/python.md does not list: {', '.join(missing)}"


def test_python_md_lists_every_public_name_with_an_example():
    """Each name `study` exports has a row in docs/python.md: the name, one line, an example
    that uses it."""
    rows = {m.group(1): m.group(3) for m in
            re.finditer(r"^\| `(study\.\w+)` \| ([^|]+) \| `([^|]+)` \|$", PYTHON_MD, re.M)}
    missing = [f"study.{n}" for n in study.__all__ if n != "__version__" and f"study.{n}" not in rows]
    assert not missing, f"docs/python.md has no row for {', '.join(missing)}"
    bad = [n for n, example in rows.items() if n.split(".")[1] not in example]
    assert not bad, f"examples that do not use their name: {', '.join(bad)}"


def test_a_notebook_shows_run_cache():
    sources = ["\n".join(c.source for c in code_cells(nbformat.read(p, as_version=4)))
               for p in NOTEBOOKS]
    assert any(".cache(" in s for s in sources)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """The runs of examples/smoke.toml, trained once for this file's notebooks, in a
    temporary directory (under the names the sweep gives them)."""
    from study.run.config import resolve
    from study.run.runner import run
    from study.sweep.plan import parse

    root = tmp_path_factory.mktemp("smoke-runs")
    plan, _ = parse([f"study={ROOT / 'examples' / 'smoke.toml'}"])
    return [run(resolve({**r.combo, "run_dir": str(root / r.path.name)})).path for r in plan.runs]


@pytest.mark.slow  # each notebook executed in a fresh kernel
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_the_smoke_runs(path, smoke_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    book = _executor().execute(nbformat.read(path, as_version=4), smoke_runs)
    cells = code_cells(book)  # execute raises CellExecutionError naming a failing cell
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert figure_of(cells[-1]), f"{path.name}: its last cell shows no figure"


def _fake_run(path, task, model, scale, analyses=(), status="done"):
    """A run directory as `find_run` reads it (config, status, marker, tables), no weights."""
    path.mkdir(parents=True)
    (path / ".study-run").write_text(json.dumps({"hash": "0" * 8}))
    (path / "config.json").write_text(json.dumps(
        {"task": task, "model": model, "seed": 0, "scale": scale, "task_config": {},
         "model_config": {}, "train": {}}))
    (path / "status.json").write_text(json.dumps({"status": status}))
    for name in analyses:  # every file the analysis must leave, each readable
        folder = path / "analyses" / name
        folder.mkdir(parents=True)
        for file in required_files(name) or (f"{name}.parquet",):
            if file.endswith(".safetensors"):
                save_file({"x": np.zeros(1, dtype=np.float32)}, str(folder / file))
            else:
                pd.DataFrame({"x": [0]}).to_parquet(folder / file)
    return path


def test_find_run_takes_the_largest_scale_then_the_newest(tmp_path):
    import os

    smoke = _fake_run(tmp_path / "counting-gru-s0-aaaaaaaa", "counting", "gru", "smoke", ["das"])
    small = _fake_run(tmp_path / "sub" / "counting-gru-s0-bbbbbbbb", "counting", "gru", "small",
                      ["das"])
    _fake_run(tmp_path / "counting-gru-s0-cccccccc", "counting", "gru", "small", [])  # no das
    _fake_run(tmp_path / "counting-gru-s0-dddddddd", "counting", "gru", "small", ["das"],
              status="failed")
    _fake_run(tmp_path / "counting-lstm-s0-eeeeeeee", "counting", "lstm", "small", ["das"])
    os.utime(small / "status.json", (1, 1))  # the small run finished long before the smoke one
    assert study.find_run(task="counting", model="gru", analyses=["das"],
                          root=tmp_path).path == small
    assert study.find_run(task="counting", model="gru", analyses="das", root=tmp_path,
                          scale="smoke").path == smoke
    newer = _fake_run(tmp_path / "counting-gru-s0-ffffffff", "counting", "gru", "small", ["das"])
    assert study.find_run(task="counting", model="gru", analyses=["das"],
                          root=tmp_path).path == newer


def test_find_run_finds_the_nearest_runs_folder_from_where_it_is_opened(tmp_path, monkeypatch):
    """A notebook opened from examples/, from the repository root or from deeper finds the
    repository's runs/ without a path written into it."""
    run = _fake_run(tmp_path / "runs" / "counting-gru-s0-aaaaaaaa", "counting", "gru", "smoke",
                    ["das"])
    (tmp_path / "examples" / "deeper").mkdir(parents=True)
    for here in (tmp_path, tmp_path / "examples", tmp_path / "examples" / "deeper"):
        monkeypatch.chdir(here)
        found = study.find_run(task="counting", model="gru", analyses=["das"])
        assert found.path.resolve() == run.resolve()


def test_find_run_without_a_match_names_the_command_that_makes_one(tmp_path):
    _fake_run(tmp_path / "counting-gru-s0-aaaaaaaa", "counting", "gru", "smoke", ["patching"])
    with pytest.raises(UsageError) as e:
        study.find_run(task="counting", model="gru", analyses=["das"], root=tmp_path)
    message = str(e.value)
    assert "\n" not in message and str(tmp_path) in message
    assert "`python -m study run task=counting model=gru scale=small analyses=das`" in message
    with pytest.raises(UsageError, match="unknown model 'grux'"):
        study.find_run(task="counting", model="grux", root=tmp_path)
