"""Vega-Lite rendering without a network: the JavaScript bundle inlined into HTML reports and
PNG export, both from vl-convert (which ships Vega, Vega-Lite and Vega-Embed)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import altair as alt
import vl_convert as vlc

from study.core.rundir import atomic_write_bytes

# Renders every `<script type="application/json" class="vl-spec" data-for=KEY>` into the
# element `#chart-KEY`; marks each chart `data-rendered` (or `data-error`) and the body
# `data-rendered` once all are done, so a browser (or a test) can tell the page is complete.
RENDER_SNIPPET = """
const jobs = [];
for (const el of document.querySelectorAll('script.vl-spec')) {
  const target = document.getElementById('chart-' + el.dataset.for);
  const spec = JSON.parse(el.textContent);
  jobs.push(vegaEmbed(target, spec, {renderer: 'canvas', actions: false})
    .then(() => { target.dataset.rendered = 'true'; })
    .catch((err) => {
      target.dataset.error = String(err);
      target.textContent = 'This chart could not be drawn: ' + err;
      console.error(err);
    }));
}
Promise.all(jobs).then(() => { document.body.dataset.rendered = 'true'; });
"""


def vl_version() -> str:
    """The Vega-Lite version altair writes (e.g. '6.1'), as vl-convert names it."""
    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    known = getattr(vlc, "get_vegalite_versions", lambda: [major_minor])()
    return major_minor if major_minor in known else known[-1]


def javascript_bundle() -> str:
    """Vega-Embed + Vega-Lite + Vega with the render snippet, as one ES module (about 0.9 MB).
    Bundling takes seconds, so the result is cached under $STUDY_CACHE."""
    key = hashlib.sha256(f"{vlc.__version__}|{vl_version()}|{RENDER_SNIPPET}".encode()).hexdigest()
    cache = Path(os.environ.get("STUDY_CACHE", Path.home() / ".cache" / "study"))
    path = cache / "report" / f"vega-bundle-{key[:16]}.js"
    try:
        return path.read_text()
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    text = vlc.javascript_bundle(RENDER_SNIPPET, vl_version=vl_version())
    try:
        atomic_write_bytes(path, text.encode())
    except OSError:  # a read-only cache only costs the next report a few seconds
        pass
    return text


def to_png(spec: dict, scale: float = 2.0) -> bytes:
    """A chart's PNG (offline; fonts are vl-convert's own)."""
    return vlc.vegalite_to_png(spec, vl_version=vl_version(), scale=scale)
