"""Facts the docs state about the code or about each other, checked against their source so
that one cannot drift from the other: how many notebooks `make notebooks` makes, which
positions binding scores, binding's program lengths per scale, and the measured time of
binding's laptop study wherever it is quoted."""
from __future__ import annotations

import re

from study.core.registry import get
from study.run.config import train_config
from tests.conftest import ROOT

WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "both": 2}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end > 0 else None]


def test_the_readme_counts_the_notebooks_make_notebooks_makes():
    readme = (ROOT / "README.md").read_text()
    said = re.findall(r"`make notebooks` re-makes (?:all )?(\w+)", readme)
    assert said and all(WORDS.get(w) == len(list((ROOT / "examples").glob("*.ipynb")))
                        for w in said), said


def test_binding_page_names_the_scored_positions_its_runs_use():
    page = (ROOT / "docs" / "tasks" / "binding.md").read_text()
    task = get("task", "binding")
    for scale in ("paper", "small"):
        used = train_config(task, scale, {}).loss_on
        for heading in ("## Format", "## Known differences"):
            section = _section(page, heading)
            assert f"`train.loss_on={used}`" in section, (scale, heading)
            scored = [line for line in section.splitlines() if "scored" in line or "score" in line]
            assert not any(f"scored (`train.loss_on={other}`" in line for line in scored
                           for other in ("answer", "all") if other != used), (scale, heading)


def test_docs_readme_gives_binding_program_lengths_of_each_scale():
    index = (ROOT / "docs" / "README.md").read_text()
    start = index.index("- [`binding`](tasks/binding.md)")
    line = " ".join(index[start:].split("\n- ", 1)[0].split())  # the item, joined
    task = get("task", "binding")
    paper, small = (task.make_config(s).n_lines for s in ("paper", "small"))
    assert f"{paper} lines at `scale=paper`" in line and f"{small} in the laptop" in line, line
    results = next(line for line in index.splitlines() if "[results.md](results.md)" in line)
    assert "binding" in index.split(results, 1)[1].split("\n- ", 1)[0]


def test_the_binding_laptop_study_time_is_quoted_as_measured():
    pattern = r"(\d+ h \d+ min) of run time for the 15\s+runs"
    results = re.findall(pattern, (ROOT / "docs" / "results.md").read_text())
    performance = (ROOT / "docs" / "performance.md").read_text()
    line = performance[performance.index("Binding's laptop study"):].split("\n- ", 1)[0]
    assert "not yet measured" not in line
    assert results and re.findall(pattern, line) == results[:1], (results, line)
