"""A report as Markdown with PNG charts, for pasting into papers and issues."""
from __future__ import annotations

from pathlib import Path

from study.reports.build import Report
from study.reports.html import runs_table
from study.reports.vega import to_png
from study.core.markdown import markdown_table
from study.core.rundir import atomic_write_bytes


def _md(text) -> str:
    """Text safe in a Markdown table cell or heading: no pipes, no line breaks."""
    text = str(text).replace("\\", "\\\\").replace("\n", " ")
    for ch in "|[]()*_`<>":
        text = text.replace(ch, "\\" + ch)
    return text


def _table(df) -> str:
    return markdown_table(df.map(lambda v: _md(v) if isinstance(v, str) else v)
                          .rename(columns=_md))


def write_markdown(report: Report, out: Path, figures_dir: str = "figures") -> Path:
    """Write `out/report.md` and one PNG per chart under `out/figures/`."""
    lines = [f"# {_md(report.title)}", "", "## Runs", "", _table(runs_table(report)), ""]
    for t in report.tasks:
        lines += [f"## Task: {_md(t.task)}", ""]
        for s in t.sections:
            lines += [f"### {_md(s.title)}", ""]
            for f in s.figures:
                lines += [f"**{_md(f.title)}.** {_md(f.caption)}", ""]
                if f.points:
                    lines += [*(f"- {_md(p)}" for p in f.points), ""]
                if f.chart is not None:
                    png = f"{figures_dir}/{f.key}.png"
                    atomic_write_bytes(out / png, to_png(f.spec()))
                    lines += [f"![{_md(f.title)}]({png})", ""]
                if f.table is not None:
                    lines += [_table(f.table), ""]
    path = out / "report.md"
    atomic_write_bytes(path, "\n".join(lines).encode())
    return path
