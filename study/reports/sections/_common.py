"""Helpers shared by the report sections: chart sizes that fit the page, the log training-step
axis, colours per architecture, seed aggregation, site labels. Charts compare architectures on
shared axes, so every section colours a model the same way (`model_color`)."""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

# Sizes, in CSS pixels. The page (study/reports/html.py) is PAGE_WIDTH wide; a chart is its
# panels plus axes, gaps and a legend, so a row of panels shares PLOT_WIDTH and every chart
# fits the page without scrolling (tests/reports/test_browser.py checks it in Chromium).
PAGE_WIDTH = 1352  # the page's content: a 1400-px window less the margins
PLOT_WIDTH = 1060  # what the panels of one row share: PAGE_WIDTH less axes, gaps and a legend
WIDTH = 500  # one facet panel where two share a row (no chart narrower than half the page)
HEIGHT = 200
TALL = 240  # a full-width panel (a training trajectory): tall enough to tell plateaus apart
GAP = 60  # per extra panel in a row: its own axis and the gap between panels
MIN_CHART = 700  # no chart narrower than half a 1,400-px window: its panels widen to reach it


def at_least(width: int, panels: int = 1) -> int:
    """A panel width no smaller than `width` and wide enough that `panels` panels side by side
    (with their gaps) reach MIN_CHART, never past PLOT_WIDTH a row."""
    panels = max(1, panels)
    need = -(-(MIN_CHART - GAP * (panels - 1)) // panels)
    return int(min(max(width, need), max(need, (PLOT_WIDTH - GAP * (panels - 1)) // panels)))


def panel_width(columns: int) -> int:
    """Width of one panel when `columns` panels share a row of the page: the row's share,
    so that the row fills the plot width and never runs past it."""
    columns = max(1, columns)
    return (PLOT_WIDTH - GAP * (columns - 1)) // columns


def facet_columns(n: int, most: int = 2) -> int:
    """Panels a row for `n` facets: all of them up to `most`, so each stays wide."""
    return max(1, min(n, most))


def variable_panels(n: int) -> tuple[int, int]:
    """(columns, panel width) for `n` facets: two a row, one alone spanning the page, so a
    chart is never narrower than half the page."""
    columns = facet_columns(n)
    return columns, panel_width(columns)


# 0, 1, 2, 5, 10, ..., 500, 1k, 2k, 5k, 10k (Vega writes symlog ticks as 1e+2 otherwise)
STEP_LABEL = ("datum.value >= 1000 ? format(datum.value / 1000, '~g') + 'k' "
              ": format(datum.value, '~g')")


def step_axis(field: str, steps, title: str = "training step") -> alt.X:
    """A training-step axis on a symmetric-log scale: the phase transitions of these tasks happen
    in the first few percent of training, which a linear axis squeezes into its first pixels;
    symlog (linear near 0, logarithmic beyond) keeps step 0 — the untrained network — on the
    axis. Ticks at 0 and at 1, 2 and 5 times each power of ten up to the last step
    (those that would overlap are left out)."""
    last = max((int(s) for s in steps), default=1)
    ticks = [0] + [m * 10 ** e for e in range(0, 8) for m in (1, 2, 5)
                   if m * 10 ** e <= max(last, 1)]
    return alt.X(f"{field}:Q", title=f"{title} (log scale; 0 = untrained)",
                 scale=alt.Scale(type="symlog", constant=1, nice=False),
                 axis=alt.Axis(values=ticks, labelExpr=STEP_LABEL, labelFlush=False,
                               labelOverlap="greedy", grid=True))


def model_color(runs, field: str = "model", legend: bool = True) -> alt.Color:
    """One colour per architecture (or per run label), the same in every chart of a report."""
    domain = sorted({getattr(r, "label" if field == "run" else field) for r in runs})
    return alt.Color(f"{field}:N", title="model" if field == "model" else "run",
                     scale=alt.Scale(domain=domain, scheme="tableau10"),
                     **({} if legend else {"legend": None}))


def run_color(runs) -> alt.Color:
    """Colour by architecture when each has one run, else by run (for per-run lines)."""
    return model_color(runs, "run" if several_seeds(runs) else "model")


def several_seeds(runs) -> bool:
    """True if some architecture has more than one seed among the runs."""
    models = [r.model for r in runs]
    return len(set(models)) < len(models)


def spread(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Mean, min, max, standard deviation and count of `value` over seeds, per `by` group."""
    g = df.groupby(by, dropna=False)[value]
    out = g.agg(["mean", "min", "max", "std", "count"]).reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out.rename(columns={"count": "n_seeds"})


def stacked(runs, table: str, **extra) -> pd.DataFrame | None:
    """The latest checkpoint's rows of `table` from every run that has it, with run columns."""
    parts = []
    for r in runs:
        df = r.final(table)
        if df is not None:
            parts.append(df.assign(run=r.label, model=r.model, seed=r.seed, **extra))
    return pd.concat(parts, ignore_index=True) if parts else None


def fmt(mean: float, std: float = 0.0, n: int = 1, digits: int = 3) -> str:
    """'0.912' or '0.912 ± 0.004' (± one standard deviation over n seeds)."""
    if mean is None or (isinstance(mean, float) and np.isnan(mean)):
        return "—"
    return f"{mean:.{digits}f}" if n <= 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def first_k_above(df: pd.DataFrame, threshold: float = 0.9) -> float:
    """Smallest k whose IIA reaches `threshold` (NaN if none does)."""
    hit = df[df["iia"] >= threshold]
    return float(hit["k"].min()) if len(hit) else float("nan")
