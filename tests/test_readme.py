"""The README's quick start works as written: its blocks between `<!-- quick-start -->` and
`<!-- /quick-start -->`, run verbatim and in order in an empty folder (bash blocks with
bash, Python blocks with the interpreter), each succeed; together they train a run that
learned and holds DAS tables, print its IIA from Python, and write its report."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.S)


def quick_start() -> list[tuple[str, str]]:
    """(language, code) of each fenced block of the README's quick start, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = text.index("<!-- quick-start -->"), text.index("<!-- /quick-start -->")
    return BLOCK.findall(text[start:end])


def test_the_quick_start_is_the_commands_and_snippet_the_readme_shows():
    blocks = quick_start()
    assert [lang for lang, _ in blocks] == ["bash", "bash", "python", "bash"]
    assert "run_dir=runs/try" in blocks[1][1] and "study=quickstart" in blocks[1][1]
    from study.sweep import studies
    preset = studies.load("quickstart").settings  # a named preset, not a line of overrides
    assert preset["analyses"] == "das" and preset["das.variables"] == "up_down:count"
    assert blocks[1][1].count("=") <= 3
    assert 'open_run("runs/try")' in blocks[2][1]  # the snippet reads the run just made
    assert "report runs/try" in blocks[3][1]


@pytest.mark.slow  # the quick start's GRU, its DAS and its report, as a person runs them: about a minute
def test_the_quick_start_runs_as_written(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT),  # `python -m study` is this checkout's
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}
    outputs = []
    for lang, code in quick_start():
        argv = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"{lang} block failed:\n{code}\n{r.stderr[-3000:]}"
        outputs.append(r)
    assert "counting" in outputs[0].stdout and "gru" in outputs[0].stdout  # list: the names
    run = tmp_path / "runs" / "try"  # run: the network learned, and DAS ran on it
    summary = json.loads((run / "summary.json").read_text())
    assert summary["test_accuracy"] >= 0.9, summary["test_accuracy"]
    assert "not meant to learn" not in outputs[1].stderr
    assert any((run / "analyses" / "das").glob("*.parquet"))
    iia = float(re.fullmatch(r"IIA (\S+)\n", outputs[2].stdout).group(1))  # python: a number
    assert 0.0 <= iia <= 1.0
    # run printed its DAS table, and the IIA read back through pyvene is one of its OAF rows
    printed = outputs[1].stdout
    assert "das: test IIA by k and alignment" in printed and "oaf" in printed
    oaf_col = printed.splitlines()[1].split().index("oaf")
    rows = [line.split() for line in printed.splitlines()[2:] if "up_down:count" in line]
    assert [int(r[2]) for r in rows] == [1, 2]
    assert f"{iia:.3f}" in [r[oaf_col] for r in rows], (iia, printed)
    assert printed.strip().splitlines()[-1] == "report: runs/try/report.html"
    assert (tmp_path / "runs" / "try-report" / "index.html").is_file()  # report: the page
