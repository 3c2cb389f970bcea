"""The heat map of the report sections: one cell per (x, y), coloured by a value in [0, 1]
(a rate, a score, a similarity), optionally with the value written in each cell. Every
section draws it the same way, so the scale, its colour scheme and the cell labels read
alike across the report; each caller facets the returned chart as its table needs."""
from __future__ import annotations

import altair as alt


def heatmap(data, x: alt.X, y: alt.Y, value: str, *, title: str, scheme: str, tooltip: list,
            clamp: bool = False, labels: int | None = None, white_above: float | None = None,
            width: int | None = None, height: int | None = None, **channels):
    """Cells of `data` at (`x`, `y`) coloured by the quantitative column `value` on a fixed
    [0, 1] scale (`scheme`, a Vega colour scheme; `clamp` paints values outside it as its
    ends), legend `title`.

    labels: font size of the value written in each cell to two decimals (None: no labels);
    white_above: labels of cells above this value are white (dark cells), others black;
    width, height: the size of one panel in px; channels: further encodings of the cells
    (e.g. `row=alt.Row(...)`, only without labels). The returned chart carries `data`, so
    it can be faceted by any of its columns."""
    color = alt.Color(f"{value}:Q", title=title, scale=alt.Scale(
        domain=[0, 1], scheme=scheme, **({"clamp": True} if clamp else {})))
    if labels is None:
        chart = alt.Chart(data).mark_rect().encode(x=x, y=y, color=color, tooltip=tooltip,
                                                   **channels)
    else:
        assert not channels, "channels of a labelled heat map go on its facet"
        base = alt.Chart().encode(x=x, y=y)
        rect = base.mark_rect().encode(color=color, tooltip=tooltip)
        text = base.mark_text(fontSize=labels).encode(
            text=alt.Text(f"{value}:Q", format=".2f"),
            **({} if white_above is None else {"color": alt.condition(
                f"datum.{value} > {white_above}", alt.value("white"), alt.value("black"))}))
        chart = alt.layer(rect, text, data=data)
    size = {k: v for k, v in (("width", width), ("height", height)) if v is not None}
    return chart.properties(**size) if size else chart


def matrix_size(n: int, panels: int = 2) -> dict:
    """Width and height of one n × n run matrix, `panels` of them to a row: 38 px a column,
    narrower where the row would outgrow the page (a three-seed study of five families
    compares 15 runs), 24 px a row, and wide enough that the row reaches half the page
    (`at_least`). Below 26 px a column a cell cannot hold its number."""
    from study.reports.sections._common import GAP, PLOT_WIDTH, at_least
    fit = (PLOT_WIDTH - 160) // panels - GAP  # 160: the run names beside the first panel
    return {"width": at_least(max(90, min(38 * n, fit)), panels), "height": max(60, 24 * n)}

