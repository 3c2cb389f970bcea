"""The HTML report in a real browser: headless Chromium (Debian's, driven by Playwright) opens
`index.html` from disk and must draw every chart, offline, without a script error, quickly,
and show hostile run names as text; each task's report fits a 1400-px window, its training
trajectories on a log step axis. Skipped, with how to install, where the browser is missing.
"""
import json
import shutil
import types
from pathlib import Path

import pytest

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    pytest.skip("Playwright is not installed: `pip install -e '.[test]'` (make setup does this)",
                allow_module_level=True)

from study.reports.build import build_report
from study.claims.runs import load_runs
from study.reports.write import write_report

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"  # ignored by git; screenshots for a person to look at
pytestmark = pytest.mark.slow  # Chromium started and every report drawn: minutes

# Debian's package (or a `chromium` on PATH); the browser is never downloaded [ours]
CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")
# No sandbox (containers run as root), no GPU, and nothing that talks to the network on its own,
# so that every request the page makes is the page's.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RENDER_TIMEOUT_MS = 60_000  # a page that never finishes fails here instead of hanging
FAST_MS = 8_000  # a page that takes seconds to draw fails; margin for a busy machine running the suite
HOSTILE = "<img src=x onerror=alert(1)>"

# Runs before the page's own scripts: stamps the in-page clock (ms since navigation start,
# `performance.now()`) at the moment `<body>` receives `data-rendered`, i.e. once vega-embed
# has finished every chart. A MutationObserver fires in the same task, so polling latency
# does not enter the measurement.
STAMP_RENDERED = """
new MutationObserver((_, obs) => {
  if (document.body && document.body.dataset.rendered === 'true') {
    window.__renderedAt = performance.now();
    obs.disconnect();
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-rendered']});
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium not found at {CHROMIUM}: install Debian's `chromium` package "
                    f"(`apt-get install chromium`; make test-slow does this where it can)")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            headless=True, args=ARGS, viewport={"width": 1400, "height": 900})
        yield context
        context.close()


def open_report(context, html: Path):
    """Open a report from disk and wait until every chart is drawn (or failed); returns what
    the page did: console errors, page errors, requests, dialogs."""
    seen = types.SimpleNamespace(console_errors=[], page_errors=[], requests=[], dialogs=[])
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and seen.console_errors.append(m.text))
    page.on("pageerror", lambda e: seen.page_errors.append(str(e)))
    page.on("request", lambda r: seen.requests.append(r.url))

    def on_dialog(d):
        seen.dialogs.append(d.message)
        d.dismiss()
    page.on("dialog", on_dialog)
    page.add_init_script(STAMP_RENDERED)
    page.goto(html.as_uri())
    page.wait_for_selector('body[data-rendered="true"]', state="attached",
                           timeout=RENDER_TIMEOUT_MS)
    seen.rendered_ms = page.evaluate("window.__renderedAt")
    seen.page = page
    return seen


@pytest.fixture(scope="module")
def smoke_page(browser, smoke_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("browser-report")
    html = write_report(smoke_runs, out, markdown=False)
    seen = open_report(browser, html)
    seen.n_charts = build_report(load_runs(smoke_runs)).n_charts
    ARTIFACTS.mkdir(exist_ok=True)
    seen.page.screenshot(path=str(ARTIFACTS / "report-smoke.png"), full_page=True)
    yield seen
    seen.page.close()


def test_no_script_errors(smoke_page):
    assert smoke_page.console_errors == []
    assert smoke_page.page_errors == []


def test_works_offline(smoke_page):
    """Everything the page needs is inside the file: it asks for nothing but itself."""
    schemes = {url.partition(":")[0] for url in smoke_page.requests}
    assert smoke_page.requests and schemes <= {"file", "data", "blob"}, smoke_page.requests
    assert [u for u in smoke_page.requests if not u.startswith(("data:", "blob:"))] \
        == [smoke_page.page.url]


def test_every_chart_is_drawn(smoke_page):
    page = smoke_page.page
    n = smoke_page.n_charts
    assert n > 0
    assert int(page.get_attribute("body", "data-charts")) == n
    assert page.locator('.chart[data-rendered="true"]').count() == n
    assert page.locator(".chart[data-error]").count() == 0
    assert page.locator(".chart").count() == n
    # Each chart has a canvas with pixels on it: a real size and something other than blank.
    drawn = page.eval_on_selector_all(".chart", """els => els.map(el => {
        const c = el.querySelector('canvas');
        if (!c || !c.width || !c.height) return false;
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
        return false;
    })""")
    assert drawn == [True] * n


def test_every_architecture_is_named(smoke_page):
    text = smoke_page.page.inner_text("body")
    for arch in ("gru", "lstm", "rope2"):
        assert arch in text


def test_renders_fast(smoke_page):
    """From navigation start to the last chart drawn, by the page's own clock."""
    ms = smoke_page.rendered_ms
    print(f"report rendered in {ms:.0f} ms ({smoke_page.n_charts} charts)")
    assert ms is not None and 0 < ms < FAST_MS, f"rendered in {ms} ms"


def hover_until_tooltip(page, needle: str) -> str | None:
    """Move the mouse over the inked pixels of each chart until vega's tooltip contains
    `needle`; returns the tooltip's text (None if no mark under the pointer names it)."""
    for chart in page.query_selector_all(".chart"):
        chart.scroll_into_view_if_needed()
        box = chart.query_selector("canvas").bounding_box()
        points = chart.evaluate(INKED_POINTS)
        for x, y in points[::max(1, len(points) // 80)]:  # at most ~80 probes a chart
            page.mouse.move(box["x"] + x, box["y"] + y)
            text = page.evaluate(TOOLTIP_TEXT)
            if text and needle in text:
                return text
    return None


# Canvas points (CSS px from the canvas' corner) drawn in colour, one per 4x4 px cell: where
# the marks are, so hovering them finds tooltips (grey axes and gridlines are left out).
INKED_POINTS = """el => {
  const c = el.querySelector('canvas');
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const sx = c.width / c.clientWidth, sy = c.height / c.clientHeight;
  const cells = new Set(), out = [];
  for (let y = 0; y < c.height; y += 2) for (let x = 0; x < c.width; x += 2) {
    const i = 4 * (y * c.width + x), r = px[i], g = px[i + 1], b = px[i + 2];
    if (px[i + 3] > 200 && Math.max(r, g, b) - Math.min(r, g, b) > 60) {
      const cell = Math.round(x / sx / 4) + ',' + Math.round(y / sy / 4);
      if (!cells.has(cell)) { cells.add(cell); out.push([x / sx, y / sy]); }
    }
  }
  return out;
}"""
TOOLTIP_TEXT = """() => {
  const t = document.getElementById('vg-tooltip-element');
  return t && t.classList.contains('visible') ? t.innerText : null;
}"""


def test_hostile_run_name_is_shown_as_text(browser, smoke_runs, tmp_path):
    """A run directory named like markup is shown literally, in tables and in the charts'
    tooltips, and never becomes an element.

    The run is a copy of a real one under the hostile name (reports read only the directory);
    its model and seed clash with the original's, so its name also enters the chart labels."""
    original = next(p for p in smoke_runs if p.name == "counting-gru-s0")
    try:
        hostile = Path(shutil.copytree(original, tmp_path / HOSTILE))
    except OSError as e:
        pytest.skip(f"this filesystem refuses the directory name {HOSTILE!r}: {e}")
    html = write_report([original, hostile], tmp_path / "out", markdown=False)
    seen = open_report(browser, html)
    page = seen.page
    try:
        assert seen.console_errors == [] and seen.page_errors == []
        n = int(page.get_attribute("body", "data-charts"))
        assert page.locator('.chart[data-rendered="true"]').count() == n > 0
        assert page.locator(".chart[data-error]").count() == 0
        assert HOSTILE in page.inner_text("body")
        # Tooltips are built as HTML on hover: the label must arrive there as text too.
        tooltip = hover_until_tooltip(page, HOSTILE)
        assert tooltip is not None, "no chart tooltip names the run"
        assert seen.dialogs == []
        assert page.locator("img").count() == 0
        assert page.locator("[onerror]").count() == 0
    finally:
        page.close()


# --- every task's report fits the page -------------------------------------------------------

# Per figure: how far its chart or table reaches past its own box (it would scroll) and past
# the page's right edge, in CSS pixels.
OVERFLOW = """() => {
  const page = document.documentElement.clientWidth;
  return [...document.querySelectorAll('.chart, .table-wrap')].map(el => {
    const box = el.getBoundingClientRect();
    const inner = el.querySelector('canvas, table').getBoundingClientRect();
    return {figure: el.closest('figure') ? el.closest('figure').id : el.previousElementSibling.id,
            kind: el.classList.contains('chart') ? 'chart' : 'table',
            past_box: Math.round(el.scrollWidth - el.clientWidth),
            past_page: Math.round(Math.max(box.right, inner.right) - page)};
  });
}"""


@pytest.fixture(scope="module")
def task_pages(browser, smoke_runs, tmp_path_factory):
    """One report per task, as a reader of that task's study gets it: counting (four runs, two
    seeds of one model), binding (one run), assign_add (one run, training only: its many
    evaluation pools make the widest tables)."""
    from tests.reports.conftest import make_run
    root = tmp_path_factory.mktemp("task-reports")
    runs = {"assign_add": [make_run(root, "assign_add", "attn2", 0, "")]}
    for path in smoke_runs:
        runs.setdefault(path.name.split("-")[0], []).append(path)
    pages = {}
    for task, paths in sorted(runs.items()):
        seen = open_report(browser, write_report(paths, root / task, markdown=False))
        seen.page.screenshot(path=str(ARTIFACTS / f"report-{task}.png"), full_page=True)
        pages[task] = seen
    yield pages
    for seen in pages.values():
        seen.page.close()


TASKS = ["assign_add", "binding", "counting"]


def test_the_task_reports_cover_every_task():
    from study.core import registry
    assert sorted(registry.builtin("task")) == TASKS


@pytest.mark.parametrize("task", TASKS)
def test_no_table_or_chart_runs_off_the_page(task_pages, task):
    """In a 1400-px window every chart and table fits the page's width: none reaches past the
    right edge, none needs a horizontal scroll bar, and the page itself does not scroll sideways."""
    page = task_pages[task].page
    assert page.evaluate("document.documentElement.clientWidth") == 1400
    items = page.evaluate(OVERFLOW)
    assert {i["kind"] for i in items} == {"chart", "table"}
    wide = [i for i in items if i["past_box"] > 1 or i["past_page"] > 0]
    assert wide == [], f"{task}: wider than the page: {wide}"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400


def _step_scales(spec, out: list) -> list:
    """The scale type of every x encoding of a training step or checkpoint in a Vega-Lite spec."""
    if isinstance(spec, dict):
        x = (spec.get("encoding") or {}).get("x")
        if isinstance(x, dict) and x.get("field") in ("step", "checkpoint"):
            out.append((x.get("scale") or {}).get("type", "linear"))
        for value in spec.values():
            _step_scales(value, out)
    elif isinstance(spec, list):
        for value in spec:
            _step_scales(value, out)
    return out


@pytest.mark.parametrize("task", TASKS)
def test_trajectories_use_a_log_step_axis(task_pages, task):
    """The learning transitions come in the first few percent of training: every chart drawn
    against the training step uses a log (symlog, which keeps step 0) axis, and is drawn wide."""
    page = task_pages[task].page
    specs = page.eval_on_selector_all(
        "script.vl-spec", "els => els.map(el => [el.dataset.for, el.textContent])")
    scales = {key: _step_scales(json.loads(text), []) for key, text in specs}
    trajectories = [k for k in scales if k.startswith(f"{task}-trajectory")]
    assert trajectories, f"{task}: no trajectory chart"
    for key, kinds in scales.items():
        if key in trajectories:
            assert kinds, f"{key}: no step axis"
        assert all(t in ("log", "symlog") for t in kinds), f"{key}: step axis {kinds}"
    # wide enough to read: a trajectory chart spans at least half the page
    for key in trajectories:
        width = page.evaluate("key => document.getElementById('chart-' + key)"
                              ".querySelector('canvas').getBoundingClientRect().width", key)
        assert width >= 1352 / 2, f"{key}: {width:.0f} px wide"
