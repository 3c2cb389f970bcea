"""A report as one self-contained HTML page: charts inline (Vega-Lite specs + the Vega bundle),
no network access, opens from disk. Every user-supplied string (run names, config values) is
escaped: text through `html.escape`, chart specs as JSON with `<` written as `\\u003c`."""
from __future__ import annotations

import html
import json
import re
import time

import numpy as np
import pandas as pd

from study.reports.build import Report
from study.reports.figure import slug, split_caption
from study.reports.sections._common import PAGE_WIDTH
from study.reports.vega import javascript_bundle

# The page is PAGE_WIDTH wide (charts are sized to fit it: sections/_common.py). A table wider
# than the page scrolls inside its own box, its first column (the run) staying in view; its
# headers and long cells wrap at spaces, underscores and slashes first (`_breakable`).
STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto;
       max-width: %dpx; padding: 0 24px 48px; color: #1d1d1f; }
h1 { font-size: 22px; margin: 24px 0 4px; } h2 { font-size: 19px; margin-top: 36px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 16px; margin-top: 26px; }
.meta, figcaption { color: #555; } nav > ul { padding-left: 18px; } nav ul ul { columns: 3; font-size: 13px; margin-bottom: 6px; } nav li { break-inside: avoid; }
figure { margin: 14px 0 26px; } figcaption b { color: #1d1d1f; }
figcaption details { margin-top: 3px; } figcaption summary { cursor: pointer; color: #36c; }
ul.points { margin: 8px 0; padding-left: 20px; font-size: 15px; } ul.points li { margin: 3px 0; }
.chart { overflow-x: auto; margin-top: 8px; max-width: 100%%; }
table { border-collapse: separate; border-spacing: 0; font-size: 12.5px; margin-top: 8px; }
th, td { border: 1px solid #ddd; border-width: 0 1px 1px 0; padding: 3px 7px; text-align: right;
         vertical-align: top; overflow-wrap: break-word; }
tr:first-child th { border-top-width: 1px; }
th:first-child, td:first-child { border-left-width: 1px; }
th { background: #f4f4f6; max-width: 11em; vertical-align: bottom; }
td { max-width: 34em; background: #fff; }
td.text, th.text, td:first-child, th:first-child { text-align: left; }
td:first-child, th:first-child { position: sticky; left: 0; z-index: 1; min-width: 4.5em; }
.table-wrap { overflow-x: auto; max-width: 100%%; padding-bottom: 4px; }
""" % PAGE_WIDTH


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def spec_json(spec: dict) -> str:
    """JSON safe inside <script>: no `<` (so no `</script>`), no `&`, no line separators."""
    text = json.dumps(spec, separators=(",", ":"), default=str)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _breakable(value) -> str:
    """Escaped text that may wrap after `_` (split and stratum names) and, in a path, after `/`
    too: a wide table's headers and paths fold onto lines instead of pushing it off the page."""
    text = esc(value).replace("_", "_<wbr>")
    return text.replace("/", "/<wbr>") if _PATH.fullmatch(str(value)) else text


_PATH = re.compile(r"[^\s<>&\"']*/[^\s<>&\"']*")  # a path-like word: no spaces, no markup


# A cell that reads as a number (or a number with its spread, interval or k): right-aligned
_NUMBER = re.compile(r"[-+−]?(\d[\d,]*(\.\d+)?(e[-+]?\d+)?|—|nan|inf)( ± [\d.]+)?( \(.*\))?")


def _numeric(values) -> bool:
    """True if every cell of a column reads as a number: it is right-aligned, text is not."""
    return all(isinstance(v, (int, float, np.number)) or _NUMBER.fullmatch(str(v))
               for v in values)


def table_html(df: pd.DataFrame) -> str:
    def cell(v):
        if isinstance(v, float):
            return "—" if pd.isna(v) else f"{v:.4g}"
        return _breakable(v)
    text = [not _numeric(df.iloc[:, i]) for i in range(df.shape[1])]
    cls = [' class="text"' if t else "" for t in text]
    head = "".join(f"<th{c}>{_breakable(name)}</th>" for c, name in zip(cls, df.columns))
    body = "".join("<tr>" + "".join(f"<td{c}>{cell(v)}</td>" for c, v in zip(cls, row)) + "</tr>"
                   for row in df.itertuples(index=False))
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


def runs_table(report: Report) -> pd.DataFrame:
    rows = []
    for r in report.runs:
        s = r.summary
        rows.append({"run": r.label, "task": r.task, "model": r.model, "seed": r.seed,
                     "scale": r.scale, "status": r.status,
                     "steps": s.get("steps_done", "—"), "training ended": _ended(s),
                     "test accuracy": s.get("test_accuracy", float("nan")),
                     "training time (s)": s.get("train_time_s", float("nan")),
                     "device": s.get("device", "—"), "directory": str(r.path)})
    return pd.DataFrame(rows)


def _ended(summary: dict) -> str:
    if not summary:
        return "—"
    if summary.get("time_limited"):
        return "time budget (runtime.max_minutes)"
    return "target accuracy" if summary.get("stopped_early") else "all steps"


def render(report: Report) -> str:
    parts = [f"<h1>{esc(report.title)}</h1>",
             f'<p class="meta">Generated {esc(time.strftime("%Y-%m-%d %H:%M"))} from '
             f'{len(report.runs)} run director{"y" if len(report.runs) == 1 else "ies"}; '
             f'{report.n_charts} charts.</p>']
    toc = []
    body = ['<h2 id="runs">Runs</h2>', table_html(runs_table(report))]
    for t in report.tasks:
        tid = slug("task", t.task)
        toc.append(f'<li><a href="#{tid}">{esc(t.task)}</a><ul>')
        body.append(f'<h2 id="{tid}">Task: {esc(t.task)}</h2>')
        for s in t.sections:
            sid = slug(t.task, s.title)
            toc.append(f'<li><a href="#{sid}">{esc(s.title)}</a></li>')
            body.append(f'<h3 id="{sid}">{esc(s.title)}</h3>')
            for f in s.figures:
                see = ("" if not f.links else " See also: " + ", ".join(
                    f'<a href="#{esc(key)}">{esc(text)}</a>' for text, key in f.links) + ".")
                shown, rest = split_caption(f.caption)
                more = ("" if not rest else f' <details><summary>More on this '
                        f'{"chart" if f.chart is not None else "table"}</summary>'
                        f'{esc(rest)}</details>')
                body.append(f'<figure id="{esc(f.key)}"><figcaption><b>{esc(f.title)}.</b> '
                            f'{esc(shown)}{see}{more}</figcaption>')
                if f.points:
                    body.append('<ul class="points">' + "".join(
                        f"<li>{esc(p)}</li>" for p in f.points) + "</ul>")
                if f.chart is not None:
                    body.append(f'<div class="chart" id="chart-{esc(f.key)}"></div>'
                                f'<script type="application/json" class="vl-spec" '
                                f'data-for="{esc(f.key)}">{spec_json(f.spec())}</script>')
                if f.table is not None:
                    body.append(table_html(f.table))
                body.append("</figure>")
        toc.append("</ul></li>")
    nav = f'<nav><ul><li><a href="#runs">Runs</a></li>{"".join(toc)}</ul></nav>'
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(report.title)}</title><style>{STYLE}</style></head>"
            f'<body data-charts="{report.n_charts}">' + "\n".join(parts) + nav + "\n"
            + "\n".join(body)
            + f'\n<script type="module">{javascript_bundle()}</script></body></html>\n')
