"""docs/code.md's table of the files each kind of entry is added by is true: every entry of
the project lives in the files its row names; a toy entry of each kind, added to a copy of
the tree by the files of its row alone (tests/code_map_toys.py), is listed, runs and is
reported; and the toy entries of the tests, each added by one file, are complete as the
registry takes them."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from study.core import registry
from study.core.sites import KINDS
from tests.code_map_toys import RUNS, TOYS
from tests.conftest import report_charts

ROOT = Path(__file__).resolve().parent.parent
KINDS_OF_ENTRY = ("task", "model family", "analysis", "alignment", "report section", "site kind")


def _table() -> dict[str, list[str]]:
    """entry -> the paths of its row (placeholders `<...>` kept)."""
    text = (ROOT / "docs" / "code.md").read_text(encoding="utf-8")
    section = text[text.index("## Adding an entry"):]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] in KINDS_OF_ENTRY:
            rows[cells[0]] = re.findall(r"`([^`]+)`", cells[1])
    return rows


def _fill(pattern: str, **names) -> str:
    path = pattern
    for key, value in names.items():
        path = path.replace(f"<{key}>", value)
    assert "<" not in path, f"{pattern}: a placeholder the test does not know"
    return path


def _exists(pattern: str, **names) -> bool:
    return (ROOT / _fill(pattern, **names)).exists()


def _docs_page(model: str) -> str:
    for page in sorted((ROOT / "docs" / "models").glob("*.md")):
        if f"`{model}`" in page.read_text(encoding="utf-8").splitlines()[0]:
            return page.stem
    return "(none)"


def test_the_table_has_a_row_for_every_kind_of_entry():
    assert set(_table()) == set(KINDS_OF_ENTRY)


@pytest.mark.parametrize("name", list(registry.builtin("task")))
def test_every_task_lives_where_the_table_says(name):
    assert registry.get("task", name).obj.__module__.startswith(f"study.tasks.{name}")
    missing = [p for p in _table()["task"] if not _exists(p, name=name)]
    assert not missing, missing


@pytest.mark.parametrize("name", list(registry.builtin("model")))
def test_every_model_family_lives_where_the_table_says(name):
    module = registry.get("model", name).obj.__module__
    assert module.count(".") == 2 and module.startswith("study.models."), module
    names = {"module": module.rsplit(".", 1)[1], "page": _docs_page(name)}
    missing = [p for p in _table()["model family"] if not _exists(p, **names)]
    assert not missing, missing


@pytest.mark.parametrize("name", list(registry.builtin("analysis")))
def test_every_analysis_is_added_by_the_files_the_table_names(name):
    from study.core import tables
    from study.reports.sections import sections
    assert registry.get("analysis", name).obj.__module__.startswith(f"study.analyses.{name}")
    assert tables.of_analysis(name), f"no table of {name} declared in study/core/tables.py"
    assert any(s.name == name and s.build.__module__ == f"study.reports.sections.{name}"
               for s in sections()), f"no report section {name}"
    headings = (ROOT / "docs" / "analyses.md").read_text(encoding="utf-8").splitlines()
    assert f"## `{name}`" in headings
    missing = [p for p in _table()["analysis"] if not _exists(p, name=name)]
    assert not missing, missing


def test_every_alignment_is_one_file():
    from study.analyses.das.alignments import kinds
    for name, kind in kinds().items():
        assert kind.make.__module__ == f"study.analyses.das.alignments.{name}"
        missing = [p for p in _table()["alignment"] if not _exists(p, name=name)]
        assert not missing, missing


def test_every_report_section_is_one_file():
    from study.reports.sections import sections
    for s in sections():
        assert s.build.__module__ == f"study.reports.sections.{s.name}"
        missing = [p for p in _table()["report section"] if not _exists(p, name=s.name)]
        assert not missing, missing


@pytest.mark.parametrize("kind", KINDS)
def test_a_site_kind_is_a_name_of_the_vocabulary_offered_by_the_families_declaring_it(kind):
    from study.core.network import CAPABILITIES
    from study.models.sites.modules import Sites
    text = (ROOT / "study" / "core" / "sites.py").read_text(encoding="utf-8")
    assert f'"{kind}"' in text
    assert Sites(**{kind: 1}).kinds() == {kind: 1}  # no kind needs an edit there
    promising = {c.name for c in CAPABILITIES.values() if kind in c.site_kinds}
    assert promising, f"no capability of study/core/network.py promises {kind!r}"
    families = [e for e in registry.builtin("model").values() if e.capabilities & promising]
    assert families, f"no family offers {kind!r}"
    for entry in families:
        module = entry.obj.__module__.rsplit(".", 1)[1]
        missing = [p for p in _table()["site kind"] if not _exists(p, module=module)]
        assert not missing, missing


@pytest.mark.parametrize("module, kind, name", [("tests.test_toy_model", "model", "toy_elman"),
                                                ("tests.test_toy_task", "task", "toy")])
def test_a_toy_entry_is_added_by_its_one_file(module, kind, name):
    """The toy entries of the tests are each one file, registered as the table's first file
    registers a project's entry: the registry takes the entry, its config and its object
    from that one module."""
    import importlib
    if name not in registry.entries(kind):  # pytest may have imported the file already, by
        importlib.import_module(module)     # its own name for it: a second import registers twice
    entry = registry.get(kind, name)
    file = module.rsplit(".", 1)[-1]
    assert getattr(entry.obj, "__wrapped__", entry.obj).__module__.rsplit(".", 1)[-1] == file
    assert entry.config.__module__.rsplit(".", 1)[-1] == file


def _is_of(path: str, pattern: str) -> bool:
    """Whether a file is the row's file `pattern` (a path filled in) or lies in its folder."""
    return path == pattern or (pattern.endswith("/") and path.startswith(pattern))


@pytest.mark.parametrize("row", KINDS_OF_ENTRY)
def test_a_toy_entry_is_made_of_the_files_of_its_row(row):
    """Each toy entry of the copied tree writes every file its row names and no other."""
    names, changes = TOYS[row]
    patterns = [_fill(p, **names) for p in _table()[row]]
    paths = [c.path for c in changes]
    assert [p for p in paths if not any(_is_of(p, q) for q in patterns)] == []
    assert [q for q in patterns if not any(_is_of(p, q) for p in paths)] == []


@pytest.fixture(scope="module")
def toy_tree(tmp_path_factory):
    """A copy of the tree (study/, docs/) with every toy entry added; what `study list` and
    `study describe analysis=das` say there; and its runs (`RUNS`), each with its report."""
    root = tmp_path_factory.mktemp("tree")
    for part in ("study", "docs"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    for _, changes in TOYS.values():
        for change in changes:
            change.apply(root)

    def python(*args) -> str:
        done = subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)}, timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    listed = python("-m", "study", "list")
    described = python("-m", "study", "describe", "analysis=das")
    python("-c", RUNS, str(root / "runs"))
    runs = {}
    for name in ("gru2", "attn2"):
        path = root / "runs" / name
        runs[name] = SimpleNamespace(
            path=path, status=json.loads((path / "status.json").read_text())["status"],
            charts=report_charts(path / "report.html"))
    return SimpleNamespace(listed=listed, described=described, runs=runs)


def _chart(run, key: str) -> list[dict]:
    (rows,) = [rows for k, rows in run.charts.items() if k.endswith(key)]
    return rows


def test_the_toy_task_and_model_family_are_listed_and_run(toy_tree):
    assert re.search(r"^  counting2 ", toy_tree.listed, re.M)
    assert re.search(r"^  gru2 ", toy_tree.listed, re.M)
    assert toy_tree.runs["gru2"].status == toy_tree.runs["attn2"].status == "done"


def test_the_toy_analysis_is_listed_writes_its_declared_table_and_is_reported(toy_tree):
    assert re.search(r"^  norms ", toy_tree.listed, re.M)
    for run in toy_tree.runs.values():
        table = pd.read_parquet(run.path / "analyses" / "norms" / "norms.parquet")
        assert list(table.columns) == ["checkpoint", "site", "layer", "norm"] and len(table)
        assert {r["site"] for r in _chart(run, "norms")} == set(table["site"])


def test_the_toy_alignment_is_a_setting_searched_and_in_the_das_charts_and_verdict(toy_tree):
    assert "toy: orthogonal, seeds of its own" in toy_tree.described
    run = toy_tree.runs["attn2"]
    das = pd.read_parquet(run.path / "analyses" / "das" / "das.parquet")
    assert set(das["alignment"]) == {"oaf", "toy", "random"}
    assert {r["alignment"] for r in _chart(run, "das-iia")} == {"oaf", "toy", "random"}
    assert {r["alignment"] for r in _chart(run, "verdict-iia")} == {"OAF", "toy OAF"}


def test_the_toy_report_section_is_in_every_report(toy_tree):
    for run in toy_tree.runs.values():
        assert [r["run"] for r in _chart(run, "notes")]


def test_the_toy_site_kind_is_searched_by_das(toy_tree):
    das = pd.read_parquet(toy_tree.runs["attn2"].path / "analyses" / "das" / "das.parquet")
    assert set(das["site"]) == {"embed"} and das["iia"].notna().any()
