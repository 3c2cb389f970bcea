"""The pyvene package, imported once, lazily, with its start-up notice kept off stdout.

Importing pyvene takes seconds and prints a notice ("nnsight is not detected"); every module
that needs it calls `pyvene()` inside a function (or at import of a module that only loads on
demand). The import runs under `study.models.quiet.quiet`.
"""
from __future__ import annotations

from study.models.quiet import quiet

_pyvene_module = None


def pyvene():
    """The pyvene package, imported on first use with its start-up notice kept off stdout."""
    global _pyvene_module
    if _pyvene_module is None:
        with quiet():
            import pyvene as pv
        _pyvene_module = pv
    return _pyvene_module
