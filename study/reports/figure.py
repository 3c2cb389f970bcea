"""What a report is made of: figures (an altair chart or a table, with a title and a
one-sentence caption saying what to look for), grouped into sections per task."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


# Text a reader can read at the page's size (Vega-Lite's defaults are 10-11 px), for every chart:
# axis labels and titles, legends, and the facet headers that name each panel's run or variable.
READABLE = {
    "axis": {"labelFontSize": 11, "titleFontSize": 12},
    "legend": {"labelFontSize": 11, "titleFontSize": 12},
    "header": {"labelFontSize": 13, "labelFontWeight": "bold", "titleFontSize": 13},
    "title": {"fontSize": 13},
}


@dataclass
class Figure:
    key: str  # unique within a report: anchors and PNG file names
    title: str
    caption: str  # what to look for: its first two sentences shown, the rest folded (html.py)
    chart: Any = None  # an altair chart, or None for a table-only figure
    table: pd.DataFrame | None = None  # shown under the chart (or alone)
    links: tuple[tuple[str, str], ...] = ()  # (text, key of another figure): "see also"
    points: tuple[str, ...] = ()  # findings in plain words, listed above the chart or table

    def spec(self) -> dict | None:
        """The chart's Vega-Lite spec (data inlined, READABLE's text sizes where the chart
        sets none), or None. Every row is inlined: altair's 5,000-row guard is meant for
        notebooks, and a study's trajectories pass it (15 runs × 6 strata × 72 evaluations)."""
        if self.chart is None:
            return None
        import altair as alt
        with alt.data_transformers.disable_max_rows():
            spec = self.chart.to_dict()
        config = spec.setdefault("config", {})
        for part, sizes in READABLE.items():
            config[part] = {**sizes, **config.get(part, {})}
        return spec


@dataclass
class Section:
    title: str
    figures: list[Figure] = field(default_factory=list)


# A sentence ends at . ! or ? followed by a space and a capital or a quote ("e.g. the" does
# not end one).
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"])')


def split_caption(caption: str, keep: int = 2) -> tuple[str, str]:
    """(the first `keep` sentences, the rest): a long caption shows what to look for and
    folds its details (html.py puts the rest in a <details>); ('caption', '') when short."""
    parts = _SENTENCE_END.split(caption.strip())
    return " ".join(parts[:keep]), " ".join(parts[keep:])


def slug(*parts: Any) -> str:
    """A file- and anchor-safe key from free text (user-supplied names included)."""
    text = "-".join(str(p) for p in parts)
    return re.sub(r"[^a-zA-Z0-9_.]+", "-", text).strip("-").lower()[:120] or "x"
