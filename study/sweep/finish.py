"""The end of a sweep, on this machine or as SLURM's report job: the comparisons across its
finished runs (`study compare`), then their comparative report. Every run is opened once,
with the run handle (`study.open_run`)."""
from __future__ import annotations

import logging
from pathlib import Path

from study.core.errors import UsageError

_log = logging.getLogger(__name__)


def finish(paths, out, compare=None) -> Path:
    """The comparisons across the finished runs (`compare`: their CompareConfig, None for
    the defaults), then their comparative report."""
    from study.run.handle import open_runs
    from study.claims.runs import labelled
    from study.reports.write import write_runs_report
    runs = open_runs(paths)
    compare_end(runs, out, compare)  # before the report reads the runs: it draws their comparisons
    return write_runs_report(labelled([run.run_tables for run in runs]), out)


def prepare_finish() -> None:
    """Import what the comparisons and the report need (pyvene, the report writer: seconds
    each), while the last runs still train: the local launcher calls this once a core falls
    idle, so that the end of the sweep does not wait for it."""
    import importlib

    from study.models.sites.pyvene_loader import pyvene
    pyvene()
    importlib.import_module("study.reports.write")


def compare_end(runs, out, cfg=None) -> None:
    """The sweep's comparisons across its opened runs (`study compare`), when at least two
    runs of a task saved das alignments (at compare.site=atlas: atlas alignments, a run
    without them named in a warning and left out); a failure is reported and the report
    written without them."""
    from study.analyses.compare.sites import ATLAS
    folder = "atlas" if cfg is not None and cfg.site == ATLAS else "das"
    with_das = [r for r in runs
                if any((r.path / "analyses" / folder).glob("alignments*.safetensors"))]
    if folder == "atlas" and len(with_das) < len(runs):
        left = [str(r.path) for r in runs if r not in with_das]
        _log.warning(f"warning: compare.site=atlas: {', '.join(left)} saved no atlas "
                     f"alignments; compared without them")
    if len(with_das) < 2:
        return
    from study.run.compare import compare_runs
    _log.info(f"comparing {len(with_das)} runs across architectures → {Path(out) / 'comparisons'}")
    try:
        compare_runs(with_das, out, cfg)
    except (UsageError, ValueError, RuntimeError) as e:
        _log.warning(f"warning: comparisons across runs skipped: {e}")
