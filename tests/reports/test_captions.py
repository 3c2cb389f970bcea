"""Captions read in a browser: the first two sentences shown, the rest folded in a
<details>; a figure's plain-language findings listed above its table; the Markdown report
keeps the whole caption and the findings."""
import pandas as pd

from study.reports.build import Report, TaskReport
from study.reports.figure import Figure, Section, split_caption
from study.reports.html import render
from study.reports.markdown import write_markdown

LONG = ("First, what to look for. Second, how to read it, e.g. the dots. Third, a detail "
        "of the method. Fourth, another one.")


def _report(points=()):
    fig = Figure(key="f", title="A table", caption=LONG, points=points,
                 table=pd.DataFrame({"a": [1]}))
    return Report(runs=[], tasks=[TaskReport("counting", [], [Section("S", [fig])])])


def test_a_caption_keeps_two_sentences_and_folds_the_rest():
    shown, rest = split_caption(LONG)
    assert shown == "First, what to look for. Second, how to read it, e.g. the dots."
    assert rest == "Third, a detail of the method. Fourth, another one."
    assert split_caption("One. Two.") == ("One. Two.", "")
    html = render(_report())
    head, _, folded = html.partition("<details>")
    assert "Second, how to read it" in head and "Third" not in head
    assert "Third, a detail" in folded.partition("</details>")[0]


def test_findings_are_listed_above_the_table_and_kept_in_markdown(tmp_path):
    points = ("count: gru holds it in a subspace.", "phase: rope2 does not.")
    html = render(_report(points))
    figure = html[html.index('<figure id="f">'):]
    assert figure.index("<li>count: gru holds it") < figure.index("<table>")
    md = write_markdown(_report(points), tmp_path).read_text()
    assert "- count: gru holds it in a subspace." in md
    assert "Fourth, another one." in md  # the Markdown report keeps the whole caption
