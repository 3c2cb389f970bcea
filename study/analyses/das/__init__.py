"""Distributed Alignment Search: the `das` analysis (`study/analyses/das/analysis.py`: its
settings, its checks and its run) and the modules behind it — the alignments
(`alignment.py`, `alignments/`), the cached site data and the search (`search.py`), the
training loop (`loop.py`, `stacked.py`, `update.py`), the controls (`controls.py`),
snapshots (`snapshot.py`) and pyvene export (`export.py`).

This package only re-exports the analysis's public names, so that importing any of its
modules (the loop, say) imports the analysis's settings and nothing heavier; none of the
modules imports the package's names back.
"""
from __future__ import annotations

from study.analyses.das.analysis import (ALIGNMENTS, BATCH_KINDS, CONTROL_K, GROUPS, LAF_FORMS,
                                         TRAINED, DasConfig, asked_variables, check,
                                         das_variables, run)

__all__ = ["ALIGNMENTS", "BATCH_KINDS", "CONTROL_K", "GROUPS", "LAF_FORMS", "TRAINED",
           "DasConfig", "asked_variables", "check", "das_variables", "run", "pairs_right"]


def __getattr__(name: str):
    """`pairs_right(iv, pt, src, batch_size)`, which needs torch, imported on first use so
    that the command line reads the settings without it: (n,) bool, each pair's every scored
    output under an intervenable is the counterfactual one (the das table's IIA counts these;
    `study.iia` scores a run's pairs with it)."""
    if name == "pairs_right":
        from study.analyses.das.search import pairs_right
        return pairs_right
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
