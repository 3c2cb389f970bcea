"""Our calls into pyvene and transformers, kept off the user's stdout and stderr.

pyvene prints on import (a notice that nnsight is absent) and while saving ("Directory ...
created"), and logs warnings through the *root* logger (`logging.warning(...)`, e.g. "The
key is provided in the config" on every `IntervenableModel.load`), which also installs a
stderr handler on the root logger when it has none. transformers logs to its "transformers"
logger and draws progress bars (`save_pretrained`, `from_pretrained`). None of it tells a
researcher anything about their run.

`quiet()` wraps one of our calls into those libraries: stdout is captured, records below
ERROR that come from the named packages are dropped (their own loggers are set to ERROR, and
records they send to the root logger are filtered), transformers' progress bars are off,
and everything is restored afterwards, so the user's logging and progress-bar settings are
unchanged outside our calls. Errors still reach the user.

    with quiet():
        iv = pv.IntervenableModel.load(directory, view)
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import sys

PACKAGES = ("pyvene", "transformers")


def _package_dir(name: str) -> str | None:
    """The directory a top-level package is loaded from (found without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "")


class _FromPackages(logging.Filter):
    """Drops records below ERROR logged from a file inside one of `dirs`."""

    def __init__(self, dirs: tuple[str, ...]):
        super().__init__()
        self.dirs = dirs

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.pathname.startswith(self.dirs)


@contextlib.contextmanager
def quiet(packages: tuple[str, ...] = PACKAGES):
    """Within the block: stdout captured, `packages`' records below ERROR dropped,
    transformers' progress bars off; all restored on exit."""
    root = logging.getLogger()
    dirs = tuple(d for d in map(_package_dir, packages) if d)
    had_handlers = bool(root.handlers)  # pyvene's logging.warning may add one
    # a package's own logger only once imported (transformers sets its level on import)
    loggers = [logging.getLogger(p) for p in packages if p in sys.modules]
    levels = [lg.level for lg in loggers]
    tf_logging = sys.modules.get("transformers.utils.logging")
    bars = tf_logging.is_progress_bar_enabled() if tf_logging is not None else False
    only = _FromPackages(dirs)
    root.addFilter(only)
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    if bars:
        tf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        if bars:
            tf_logging.enable_progress_bar()
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        root.removeFilter(only)
        if not had_handlers:  # pyvene's logging.warning ran logging.basicConfig: undo it
            root.handlers[:] = []
