"""Exoo et al.'s released run, scored on our nine pools: the curves a run is drawn against.

The authors released the checkpoints of their run every 100 updates (bexoo/assign-and-add,
`checkpoints/`, commit d60c064). `tools/authors_loop/score_checkpoints.py` loads each into
our `attn2` at `scale=paper` and scores it as a paper run scores itself, on 1,000 of each
pool's 2,000 examples (every second one; a standard error of at most 1.6 points), accuracy
over the 59 number logits; `exoo2026_released_run.csv` is the result, one row per
checkpoint, a column per pool. Their checkpoint `checkpoint_step_N` holds the weights
after N updates, as our step N does.
"""
from __future__ import annotations

import csv
from pathlib import Path

TABLE = Path(__file__).with_name("exoo2026_released_run.csv")
SOURCE = "Exoo et al. 2026, released run"
# the task settings the pools depend on: a run whose pools are other ones gets no reference
# (pool_size only changes how many of the same pools' examples are scored; n_train, n_val
# and form_weights change training, not the pools)
POOL_FIELDS = ("seed", "p", "n_vars", "seq_len", "min_assign", "max_assign", "heldout_frac",
               "never_right", "never_left")


def curves(config, paper_config) -> list[dict]:
    """Rows {"source", "step", "split", "accuracy"} of the released run, one per pool and
    checkpoint, where `config` builds the pools the table was scored on (those of
    `paper_config`); [] otherwise."""
    if any(getattr(config, f) != getattr(paper_config, f) for f in POOL_FIELDS):
        return []
    rows = []
    with TABLE.open(newline="") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            step = int(row.pop("step"))
            rows += [{"source": SOURCE, "step": step, "split": pool, "accuracy": float(acc)}
                     for pool, acc in row.items()]
    return rows
