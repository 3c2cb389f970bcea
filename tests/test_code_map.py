"""docs/code.md's table of the files each kind of entry is added by is true: every entry of
the project lives in the files its row names, and the toy entries of the tests, each added by
one file, are complete as the registry takes them."""
import re
from pathlib import Path

import pytest

from study.core import registry
from study.core.sites import KINDS

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


def _exists(pattern: str, **names) -> bool:
    path = pattern
    for key, value in names.items():
        path = path.replace(f"<{key}>", value)
    assert "<" not in path, f"{pattern}: a placeholder the test does not know"
    return (ROOT / path).exists()


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


def test_a_site_kind_is_a_name_of_the_vocabulary_the_site_modules_take_as_it_is():
    from study.models.sites.modules import Sites
    text = (ROOT / "study" / "core" / "sites.py").read_text(encoding="utf-8")
    assert all(f'"{kind}"' in text for kind in KINDS)
    sites = Sites(**{kind: 1 for kind in KINDS})  # no kind needs an edit there
    assert sites.kinds() == {kind: 1 for kind in KINDS}
    assert all(_exists(p) for p in _table()["site kind"])


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
