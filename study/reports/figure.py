"""What a report is made of: figures (an altair chart or a table, with a title and a
one-sentence caption saying what to look for), grouped into sections per task."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass
class Figure:
    key: str  # unique within a report: anchors and PNG file names
    title: str
    caption: str  # one sentence: what to look for
    chart: Any = None  # an altair chart, or None for a table-only figure
    table: pd.DataFrame | None = None  # shown under the chart (or alone)
    links: tuple[tuple[str, str], ...] = ()  # (text, key of another figure): "see also"

    def spec(self) -> dict | None:
        """The chart's Vega-Lite spec (data inlined), or None."""
        return None if self.chart is None else self.chart.to_dict()


@dataclass
class Section:
    title: str
    figures: list[Figure] = field(default_factory=list)


def slug(*parts: Any) -> str:
    """A file- and anchor-safe key from free text (user-supplied names included)."""
    text = "-".join(str(p) for p in parts)
    return re.sub(r"[^a-zA-Z0-9_.]+", "-", text).strip("-").lower()[:120] or "x"
