"""The rows of table `emergence` (`study/analyses/emergence/analysis.py`): each variable's
cell taken from the run's atlas or the settings (`cells`), the atlas's saved OAF there
(`atlas_alignment`), and the walk over the chosen checkpoints (`walk.py`)."""
from __future__ import annotations

import logging
import math

import pandas as pd

from study.analyses.atlas.build import cell_pairs
from study.analyses.emergence.walk import Cell, chosen_steps, walk
from study.core.errors import UsageError

_log = logging.getLogger(__name__)


def atlas_cells(atlas, checkpoint: int, variables=("atlas",)) -> list[Cell]:
    """Each variable's cell in an `atlas` table (pandas): at `checkpoint` where the table
    holds it, else its latest, the variable's first `full` row (the best screened cell, whose
    OAF the atlas saves), with its k and null; where the atlas ran no full search of the
    variable (every cell had too few tested pairs), its screened cell of the best training
    IIA. `variables` ("atlas": every variable the atlas searched) in order. A UsageError
    names a variable the atlas did not search."""
    at = checkpoint if (atlas["checkpoint"] == checkpoint).any() else atlas["checkpoint"].max()
    mine = atlas[atlas["checkpoint"] == at]
    full = mine["stage"] == "full"
    best = pd.concat([mine[full], mine[~full].assign(_t=mine["train_iia"].fillna(-1.0))
                      .sort_values("_t", ascending=False, kind="stable").drop(columns="_t")])
    firsts = best.drop_duplicates("variable", keep="first").set_index("variable")
    names = (list(dict.fromkeys(mine["variable"])) if tuple(variables) == ("atlas",)
             else list(variables))
    missing = [v for v in names if v not in firsts.index]
    if missing:
        raise UsageError(f"emergence.variables: the run's atlas (step {at}) did not search "
                         f"{', '.join(missing)}; it searched {', '.join(firsts.index) or 'none'}")
    return [Cell(v, str(firsts.at[v, "role"]), str(firsts.at[v, "site"]),
                 int(firsts.at[v, "layer"]), int(firsts.at[v, "k"]),
                 float(firsts.at[v, "null"])) for v in names]


def atlas_alignment(folder, c: Cell, checkpoint: int):
    """The atlas's saved OAF of `c` at its k (`alignments.safetensors` in the atlas's
    `folder`), or None where the file lacks it or holds another checkpoint's."""
    from safetensors import safe_open

    from study.analyses.das.alignment import load_alignment
    from study.core.alignments import file_key
    from study.core.sites import site_key

    path = folder / "alignments.safetensors" if folder is not None else None
    if path is None or not path.exists():
        return None
    key = file_key("oaf", c.variable, site_key(c.site, c.layer, -1), c.k)
    with safe_open(str(path), framework="pt") as f:
        if (f.metadata() or {}).get("checkpoint") != str(checkpoint) or key not in f.keys():
            return None
    return load_alignment(path, key)


def _cells(ctx) -> tuple[list[Cell], object]:
    """The cells to walk and the atlas's folder (None with the cell from settings)."""
    from study.analyses.das.analysis import asked_variables

    cfg = ctx.config
    if cfg.role:
        names = asked_variables(("all",) if cfg.variables == ("atlas",) else cfg.variables,
                                ctx.task)
        return [Cell(v, cfg.role, cfg.site, cfg.layer, cfg.k) for v in names], None
    folder = None if ctx.analysis_dir is None else ctx.analysis_dir("atlas")
    table = None if folder is None else folder / "atlas.parquet"
    if table is None or not table.exists():
        raise UsageError("emergence: the run has no atlas table; analyze it with atlas "
                         "first, or name the cell (emergence.role, site, layer, k)")
    asked = (cfg.variables if cfg.variables == ("atlas",)
             else asked_variables(cfg.variables, ctx.task))
    return atlas_cells(pd.read_parquet(table), ctx.checkpoint, asked), folder


def emergence_rows(ctx) -> list[dict]:
    """Every cell's rows along the chosen checkpoints; the null the atlas's (with the cell
    from settings: the highest shuffled control of the walk)."""
    cfg, task = ctx.config, ctx.task
    cells, folder = _cells(ctx)
    steps = chosen_steps(ctx.steps if ctx.model_at is not None else (), ctx.checkpoint,
                         cfg.checkpoints)
    seed = ctx.seed + cfg.seed
    rows = []
    for i, c in enumerate(cells):
        train, test = cell_pairs(task, c.variable, cfg.n_train, cfg.n_test, seed, c.role)
        first = atlas_alignment(folder, c, ctx.checkpoint)
        if first is None and folder is not None:
            _log.info(f"emergence: no atlas OAF of {c.variable} at step {ctx.checkpoint}; "
                      f"the first search is cold ({cfg.first_steps} updates)")
        init = (seed * 1_000_003 + ctx.checkpoint) * 1009 + i  # as the atlas's
        got = walk(ctx, c, train, test, steps, first, init)
        null = c.null
        if math.isnan(null):
            null = max((r["shuffled_iia"] for r in got if not math.isnan(r["shuffled_iia"])),
                       default=float("nan"))
        rows += [{**r, "null": null} for r in got]
    return rows
