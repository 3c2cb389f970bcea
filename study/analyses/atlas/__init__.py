"""The atlas: where a network holds each causal variable, DAS over every token role and
layer (`study/analyses/atlas/analysis.py`: the analysis, its settings and checks), the grid
and its batched screening pass (`grid.py`), and the table's rows and null (`build.py`).
The package only re-exports the analysis."""
from __future__ import annotations

from study.analyses.atlas.analysis import AtlasConfig, asked_roles, check, roles_of, run

__all__ = ["AtlasConfig", "asked_roles", "check", "roles_of", "run"]
