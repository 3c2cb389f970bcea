"""What an analysis is: a registered function of an `AnalysisContext` returning tidy tables.

An analysis file registers with
`@register("analysis", NAME, config=Cfg, presets={...}, requires=("attention",))` on a
function `run(ctx) -> dict[str, pandas.DataFrame]` (table name -> long-format table) and may
save learned artefacts into `ctx.out_dir` itself. `check=fn` adds a parse-time check,
`fn(config, task_cls, model_entry, model_config)`, run before anything is trained: names that
depend on the task or the model (`chosen`, `check_sites`) are refused there in one line. Registration files import only the
standard library at module level (the registry scan must stay fast); torch, pyvene, numpy
and pandas are imported inside functions or in helper modules of the analysis's own package (`study/analyses/das/search.py`), which the
run function imports when it runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# `ctx.out_dir / PARTIAL`: an analysis's work in progress (das's training snapshots,
# `study/analyses/das/snapshot.py`), kept across an interruption so that the same command
# continues it; the application removes it once the analysis's tables are written
# (`study/run/analyze.py`). It is never a table or an artefact: what a run, a report or a
# result folder reads of an analysis lies directly in its folder.
PARTIAL = "partial"


@dataclass
class AnalysisContext:
    """Everything an analysis reads: the network at the analysed checkpoint and, through
    `model_at`, at any other logged step."""

    model: Any  # torch nn.Module in eval mode, on `device`, parameters frozen
    task: Any  # study.tasks.base.Task
    config: Any  # the analysis's frozen config
    model_name: str
    checkpoint: int  # the training step of the weights analysed
    device: Any  # torch.device
    out_dir: Path  # RUN_DIR/analyses/<name>/ (exists); work in progress under PARTIAL
    seed: int = 0
    # model_at(step) -> the same network at another logged training step, prepared like
    # `model` (eval mode, on `device`, frozen); raises LookupError when the run has no such
    # checkpoint. Analyses may not import study.train, so the application (study/run/analyze.py)
    # supplies the loader; None where there are no checkpoints (tests, a bare model). `das`
    # uses model_at(0), the untrained network, for its trained control.
    model_at: Callable[[int], Any] | None = None
    # the run's logged checkpoint steps, ascending (empty where there are none, as in tests)
    steps: tuple[int, ...] = ()
    # analysis_dir(name) -> the run's folder of analysis `name` (RUN_DIR/analyses/<name>/:
    # its tables and artefacts as written so far; it may not exist): how an analysis reads
    # another's results on the same run (`emergence` reads the `atlas`). None outside a run.
    analysis_dir: Callable[[str], Path] | None = None


def chosen(key: str, asked, allowed, what: str) -> tuple:
    """The asked names (all `allowed` if none asked); an unknown one is a one-line UsageError
    naming the setting, e.g. `das.variables: 'x' is not a causal variable of counting; choose
    from ...`."""
    from study.core.errors import UsageError
    for name in asked:
        if name not in allowed:
            raise UsageError(f"{key}: {name!r} is not {what}; choose from {', '.join(allowed)}")
    return tuple(asked) or tuple(allowed)


def check_sites(key: str, asked, model_entry) -> None:
    """Refuse, before anything runs, a site kind the model family does not have."""
    from study.core.network import declared_kinds
    from study.core.errors import UsageError
    have = declared_kinds(model_entry.capabilities)
    for kind in asked:
        if kind not in have:
            raise UsageError(f"{key}: model {model_entry.name} has no {kind!r} sites; it has "
                             f"{', '.join(have)}")
