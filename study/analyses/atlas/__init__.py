"""The atlas: where a network holds each causal variable, DAS over every token role and
layer (`study/analyses/atlas/analysis.py`: the analysis, its settings and checks), the grid
and its batched screening pass (`grid.py`), the roles setting (`roles.py`), and the table's rows and null (`build.py`).
The package only re-exports the analysis."""
from __future__ import annotations

from study.analyses.atlas.analysis import AtlasConfig, check, run
from study.analyses.atlas.roles import asked_roles, roles_of

__all__ = ["AtlasConfig", "asked_roles", "check", "roles_of", "run"]
