"""When each variable appears along training: the atlas's cell of each variable searched at
every logged checkpoint, each search warm-started from the later one's
(`study/analyses/emergence/analysis.py`: the analysis, its settings and checks), the cells
and the table's rows (`build.py`), the walk over the checkpoints (`walk.py`).
The package only re-exports the analysis."""
from __future__ import annotations

from study.analyses.emergence.analysis import EmergenceConfig, check, needs, run

__all__ = ["EmergenceConfig", "check", "needs", "run"]
