"""The documentation is self-contained and complete: every registered task, model family and
analysis has its page, every relative link and anchor resolves, and no file cites a document
the repository does not contain."""
from __future__ import annotations

import io
import json
import re
import tokenize
import subprocess
from pathlib import Path

import pytest

from study.core import registry
from study.core.registry import SCALES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_SKIP_DIRS = {".git", ".venv", "runs", "__pycache__", "node_modules"}


def _repo_files() -> list[Path]:
    """Files under version control plus new ones git does not ignore (a plain walk when git
    is unavailable)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
        names = [n for n in out.stdout.decode().split("\0") if n]
        return [ROOT / n for n in names if (ROOT / n).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file()
                and not _SKIP_DIRS & set(p.relative_to(ROOT).parts)]


def _texts() -> dict[Path, str]:
    out = {}
    for path in _repo_files():
        try:
            out[path] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files
    return out


def _notebook_prose(raw: str) -> str:
    """The markdown cells of a notebook, and the comments and strings of its code cells."""
    cells = json.loads(raw).get("cells", [])
    return "\n".join("".join(c["source"]) if c["cell_type"] == "markdown"
                     else _prose("".join(c["source"])) for c in cells)


def _prose(source: str) -> str:
    """The comments and string literals of Python source, each token on its own lines."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                out.append(tok.string)
    except (tokenize.TokenError, SyntaxError):
        return source
    return "\n".join(out)


def entries(kind: str) -> dict:
    """Entries the project's own package registers (not those a test registers)."""
    return registry.builtin(kind)


def _markdown() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


# --- no references outside the repository --------------------------------------------------

def test_every_project_document_a_file_names_exists():
    """A capitalised document name (README.md and the like) must be a file of the repository:
    a citation of a planning note that is not in the repository is a dead end for readers."""
    present = {p.name for p in _repo_files()}
    missing = []
    for path, text in _texts().items():
        for m in re.finditer(r"\b[A-Z][A-Z0-9_]+\.md\b", text):
            if m.group(0) not in present:
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)}")
    assert not missing, "documents not in the repository:\n" + "\n".join(missing)


def test_provenance_markers_cite_the_papers_or_ourselves():
    """Bracketed provenance is [paper ...] or [ours ...] (lower case, with the source named
    in words); an acronym in square brackets, alone or before a colon, semicolon or quote,
    cites something a reader cannot look up. A link whose text is an acronym
    ([OAF](glossary.md#oaf)) names its target and is no citation."""
    marker = re.compile(r"\[[A-Z]{2,}(?:\](?!\()|;|:| \")")
    found = []
    for path, text in _texts().items():
        if path.suffix == ".py":  # prose only: a list literal of a constant is code, not a citation
            text = _prose(text)
        elif path.suffix == ".ipynb":  # a notebook's prose: its markdown cells and comments
            text = _notebook_prose(text)
        for m in marker.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)}")
    assert not found, "unresolvable provenance markers:\n" + "\n".join(found)


# --- a page for every registered name ------------------------------------------------------

def _title(path: Path) -> str:
    return path.read_text(encoding="utf-8").splitlines()[0]


@pytest.mark.parametrize("name", list(entries("task")))
def test_every_task_has_a_page(name):
    page = DOCS / "tasks" / f"{name}.md"
    assert page.is_file(), f"docs/tasks/{name}.md is missing"
    assert f"`{name}`" in _title(page)


@pytest.mark.parametrize("name", list(entries("model")))
def test_every_model_family_has_a_page(name):
    """One page may cover several families (gru and lstm); its title names each of them."""
    pages = [p for p in sorted((DOCS / "models").glob("*.md")) if f"`{name}`" in _title(p)]
    assert pages, f"no page under docs/models/ has `{name}` in its title"


@pytest.mark.parametrize("name", list(entries("analysis")))
def test_every_analysis_has_a_section(name):
    headings = (DOCS / "analyses.md").read_text(encoding="utf-8").splitlines()
    assert f"## `{name}`" in headings


@pytest.mark.parametrize("page", [*sorted((DOCS / "tasks").glob("*.md")),
                                  *sorted((DOCS / "models").glob("*.md"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_task_and_model_pages_give_provenance_and_every_scale(page):
    text = page.read_text(encoding="utf-8")
    assert "[paper]" in text and "[ours]" in text
    header = [line for line in text.splitlines()
              if line.startswith("| field |") and all(s in line for s in SCALES)]
    assert header, f"{page.name} has no preset table with a column per scale ({', '.join(SCALES)})"


def _number(cell: str):
    """The number a table cell starts with ("105,400", "50,000 (cap)", "1e-4"), else None."""
    token = cell.strip().split(" ")[0].replace(",", "")
    try:
        return float(token)
    except ValueError:
        return None


def _preset_rows(page: Path):
    """(field, {scale: number}) for each row of a preset table that names one field and gives
    a number under every scale."""
    columns = None
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") \
            else None
        if not cells:
            columns = None
            continue
        if cells[0] == "field":
            columns = {scale: i for i, c in enumerate(cells) for scale in SCALES
                       if c.split(" ")[0] == scale}
            continue
        m = re.fullmatch(r"`(\w+)`", cells[0])
        if columns and m and len(columns) == len(SCALES):
            values = {scale: _number(cells[i]) for scale, i in columns.items()}
            if None not in values.values():
                yield m.group(1), values


def _close(documented: float, actual) -> bool:
    return isinstance(actual, (int, float)) and abs(documented - actual) <= 1e-9 + 1e-6 * abs(actual)


@pytest.mark.parametrize("name", list(entries("task")))
def test_task_preset_tables_match_the_code(name):
    """Each single-field row of a task page's preset tables gives, per scale, the value the
    code resolves (task config first, else the task's training preset, before any family's
    own settings: `family_presets`, which the page lists per family)."""
    from study.core import registry
    from study.run.config import resolve, train_config

    checked = 0
    for field, values in _preset_rows(DOCS / "tasks" / f"{name}.md"):
        for scale, documented in values.items():
            cfg = resolve({"task": name, "model": next(iter(entries("model"))), "scale": scale})
            group = (cfg.task_config if hasattr(cfg.task_config, field)
                     else train_config(registry.get("task", name), scale))
            actual = getattr(group, field)
            assert _close(documented, actual), f"{name}.md: {field} at {scale} is {actual}"
            checked += 1
    assert checked, f"no preset row of docs/tasks/{name}.md could be checked"


@pytest.mark.parametrize("name", list(entries("model")))
def test_model_preset_tables_match_the_code(name):
    page = next(p for p in sorted((DOCS / "models").glob("*.md")) if f"`{name}`" in _title(p))
    entry = entries("model")[name]
    checked = 0
    for field, values in _preset_rows(page):
        for scale, documented in values.items():
            actual = getattr(entry.make_config(scale), field)
            assert _close(documented, actual), f"{page.name}: {field} of {name} at {scale} is {actual}"
            checked += 1
    assert checked, f"no preset row of {page.name} could be checked for {name}"


# --- links -----------------------------------------------------------------------------------

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {_slug(line) for line in lines if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", _markdown(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_the_readme_links_the_documentation():
    assert "(docs/README.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


# --- reading: short task pages, one glossary ----------------------------------------------

GLOSSARY = DOCS / "glossary.md"
_TASK_PAGE_WORDS = 2500
# The terms of the result tables that a reader meets before their definition: a paragraph of
# a result page that uses one links it to the glossary.
_GLOSSARY_TERMS = {
    "output code": "output-code", "input copy": "input-copy", "matched k": "matched-k",
    "stitched": "stitched", "letter-matched shuffled": "letter-matched-shuffled-control",
    "B's own IIA": "bs-own-iia", "tested pairs": "tested-pairs",
    "confounded with the": "confounded-with-the-input-or-the-answer",
    "code not identifiable": "code-not-identifiable",
}


def _glossary_entries() -> dict[str, str]:
    """Each heading's anchor in the glossary and the text under it, up to the next heading."""
    entries, anchor = {}, None
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if re.match(r"#{1,6} ", line):
            anchor = _slug(line)
            entries[anchor] = ""
        elif anchor is not None:
            entries[anchor] += line + "\n"
    return entries


def _result_pages() -> list[Path]:
    return [DOCS / "results.md", *sorted((DOCS / "tasks").glob("*.md"))]


def _paragraphs(text: str) -> list[str]:
    """Prose paragraphs: blank-line separated blocks, without tables, code and generated blocks."""
    text = re.sub(r"<!-- results:.*?<!-- /results -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [b for b in re.split(r"\n\s*\n", text)
            if b.strip() and not b.lstrip().startswith(("|", "#"))]


@pytest.mark.parametrize("page", sorted((DOCS / "tasks").glob("*.md")), ids=lambda p: p.name)
def test_task_pages_stay_short(page):
    """A task page keeps its claims and links to the tables: a reader finds the result in it."""
    words = len(page.read_text(encoding="utf-8").split())
    assert words <= _TASK_PAGE_WORDS, (f"{page.relative_to(ROOT)} has {words} words (at most "
                                       f"{_TASK_PAGE_WORDS}): move long tables to the result "
                                       "folders and link them")


def test_the_glossary_defines_every_term_linked_to_it():
    """Every link into the glossary lands on a heading with a definition under it, and the
    glossary defines each term the result pages are held to link."""
    entries = _glossary_entries()
    defined = {a for a, body in entries.items() if len(body.split()) >= 10}
    wanted = {(p.relative_to(ROOT), a) for p in _markdown()
              for a in re.findall(r"\]\([./]*(?:docs/)?glossary\.md#([\w-]+)\)",
                                  p.read_text(encoding="utf-8"))}
    wanted |= {("the term list", a) for a in _GLOSSARY_TERMS.values()}
    assert wanted, "no page links the glossary"
    missing = sorted(f"{page}: #{a}" for page, a in wanted if a not in defined)
    assert not missing, "glossary terms linked but not defined:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", _result_pages(), ids=lambda p: p.name)
def test_result_paragraphs_link_the_terms_they_use(page):
    """A paragraph that uses a result term (an "output code", a "matched k") links its
    definition, so that a reader can look it up where it is used."""
    unlinked = []
    for para in _paragraphs(page.read_text(encoding="utf-8")):
        for term, anchor in _GLOSSARY_TERMS.items():
            if term.lower() in para.lower() and f"glossary.md#{anchor})" not in para:
                unlinked.append(f"{term!r} in: {para.strip()[:80]}...")
    assert not unlinked, (f"{page.relative_to(ROOT)}: terms used without a glossary link:\n"
                          + "\n".join(unlinked))


def test_the_docs_index_links_the_glossary():
    assert "(glossary.md)" in (DOCS / "README.md").read_text(encoding="utf-8")
