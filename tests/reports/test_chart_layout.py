"""Every chart of a report, read on a 1,400-px page: none narrower than half the page, and
every colour encoding explained by a legend. Read from the Vega-Lite specs the sections
produce (no browser): a chart's width is its panels' widths times the panels in a row, the
panels counted from the chart's own data."""
import pytest

from study.claims.runs import load_runs
from study.reports.build import build_report
from study.reports.sections._common import GAP

HALF_PAGE = 700  # px: half the 1,400-px window the report is read in
COLOUR = ("color", "fill", "stroke")


def _data(spec, datasets, inherited):
    data = spec.get("data")
    if data is None:
        return inherited
    if "name" in data:
        return datasets.get(data["name"], [])
    return data.get("values", inherited)


def _distinct(rows, field):
    return max(1, len({str(r.get(field)) for r in rows if isinstance(r, dict)}))


def chart_width(spec, datasets, rows=()) -> float:
    """The width a spec draws at, in px (axes and legends left out: a lower bound)."""
    rows = _data(spec, datasets, rows)
    if "facet" in spec and "spec" in spec:
        inner = chart_width(spec["spec"], datasets, rows)
        facet = spec["facet"]
        if "field" in facet:
            n = _distinct(rows, facet["field"])
            cols = min(spec.get("columns") or n, n)
        else:
            cols = _distinct(rows, facet["column"]["field"]) if "column" in facet else 1
        return cols * inner + GAP * (cols - 1)
    if "hconcat" in spec:
        return sum(chart_width(s, datasets, rows) for s in spec["hconcat"])
    for key in ("vconcat", "concat"):
        if key in spec:
            return max(chart_width(s, datasets, rows) for s in spec[key])
    width = spec.get("width")
    if width is None and "layer" in spec:
        width = max(chart_width(s, datasets, rows) for s in spec["layer"])
    if isinstance(width, dict):  # {"step": px} per discrete x value
        x = (spec.get("encoding") or {}).get("x", {})
        width = width.get("step", 20) * _distinct(rows, x.get("field"))
    width = 300 if width is None else width  # Vega-Lite's default
    encoding = spec.get("encoding") or {}
    for channel in ("column", "facet"):  # panels laid out by an encoding channel
        panel = encoding.get(channel)
        if isinstance(panel, dict) and "field" in panel:
            n = _distinct(rows, panel["field"])
            n = min(n, panel.get("columns") or spec.get("columns") or n)
            width = n * width + GAP * (n - 1)
    return float(width)


def colour_fields(spec):
    """(field, has a legend) for every colour-like encoding in a spec and its views."""
    if isinstance(spec, dict):
        for channel, defn in (spec.get("encoding") or {}).items():
            if channel in COLOUR and isinstance(defn, dict) and "field" in defn:
                yield defn["field"], defn.get("legend", {}) is not None
        for value in spec.values():
            if isinstance(value, (dict, list)):
                yield from colour_fields(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from colour_fields(value)


def layout_problems(figure) -> list[str]:
    spec = figure.spec()
    out = []
    width = chart_width(spec, spec.get("datasets", {}))
    if width < HALF_PAGE:
        out.append(f"{figure.key}: {width:.0f} px wide, under {HALF_PAGE}")
    fields = list(colour_fields(spec))
    unexplained = {f for f, _ in fields} - {f for f, legend in fields if legend}
    if unexplained:
        out.append(f"{figure.key}: colour by {sorted(unexplained)} with no legend")
    return out


@pytest.fixture(scope="module")
def report(smoke_runs):
    return build_report(load_runs(smoke_runs))


def test_no_chart_is_narrower_than_half_the_page_or_colours_without_a_legend(report):
    charts = [f for f in report.figures if f.chart is not None]
    assert len(charts) > 5
    found = [p for f in charts for p in layout_problems(f)]
    assert not found, "\n".join(found)


def test_the_layout_check_catches_a_narrow_chart_and_a_hidden_colour_legend():
    import altair as alt
    import pandas as pd

    from study.reports.figure import Figure
    d = pd.DataFrame({"x": [1, 2], "y": [1, 2], "run": ["a", "b"]})
    narrow = Figure("narrow", "t", "c", chart=alt.Chart(d).mark_line().encode(
        x="x:Q", y="y:Q", color=alt.Color("run:N", legend=None)).properties(width=400))
    assert len(layout_problems(narrow)) == 2
    two = Figure("two", "t", "c", chart=alt.Chart(d).mark_line().encode(
        x="x:Q", y="y:Q", color="run:N").properties(width=400).facet(facet="run:N", columns=2))
    assert layout_problems(two) == []  # 2 × 400 + the gap


def test_a_family_of_many_values_is_pooled_into_a_few_lines_of_their_mean():
    """Counting's twenty counts are twenty near-identical lines: pooled into at most
    MAX_LINES ranges of consecutive values, each the mean of its values."""
    import pandas as pd

    from study.reports.sections.trajectory import MAX_LINES, pooled
    values = [str(v) for v in range(1, 21)]
    data = pd.DataFrame([{"run": "gru s0", "step": step, "value": v, "stratum": f"count={v}",
                          "accuracy": int(v) / 100 + step} for step in (0, 1) for v in values]
                        + [{"run": "gru s0", "step": 0, "value": "all", "stratum": "all",
                            "accuracy": 0.5}])
    out, labels = pooled(data, values)
    assert 1 < len(labels) <= MAX_LINES
    assert labels[0] == "1–4" and labels[-1].endswith("–20")
    first = out[(out["value"] == "1–4") & (out["step"] == 0)]["accuracy"].item()
    assert first == pytest.approx((1 + 2 + 3 + 4) / 400)
    assert (out["value"] == "all").sum() == 1  # the overall line is kept as it is
    same, kept = pooled(data, values[:5])
    assert kept == values[:5] and same is data


def test_geometry_labels_at_most_a_few_values_a_panel_and_every_held_out_one():
    """Twenty count labels on a curve overlap: a panel writes the first and last values, the
    held-out ones and every n-th between, about LABELS in all."""
    import pandas as pd

    from study.reports.sections.compare_geometry import LABELS, _labelled
    v = pd.DataFrame([{"panel": p, "value": float(x), "held_out": x in (7, 13)}
                      for p in ("gru s0", "lstm s0") for x in range(1, 21)])
    shown = pd.Series(_labelled(v))
    for panel in ("gru s0", "lstm s0"):
        text = set(shown[v["panel"] == panel]) - {""}
        assert {"1", "20", "7", "13"} <= text
        assert len(text) <= LABELS + 2
    few = v[v["value"] <= 5]
    assert "" not in _labelled(few)  # five values: every one labelled
