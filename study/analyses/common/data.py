"""Task data as analyses see it: a seeded sample of a split, and the correctness rule.

- `sample(task, split, n, seed)`: up to n sequences of a split (ids/labels as int64, strata);
- `correct(logits, labels, output_ids)`: the training engine's rule (`study/core/outputs.py`),
  an example is right when every scored position's argmax among the task's output ids is
  its label.

Everything else an analysis reads of a task's semantics (probe variables, attention
targets, progress-measure facts, stratum labels) is asked of the task itself.
"""
from __future__ import annotations

import numpy as np

from study.core.outputs import Outputs


def sample(task, split: str, n: int, seed: int = 0):
    """Up to n sequences of a split drawn uniformly without replacement (kept in split order):
    (ids (n, pos) int64, labels (n, pos) int64, strata name -> (n,)). Tasks may store narrow
    dtypes (binding keeps uint8 ids); analyses always see int64."""
    ex = task.split(split)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(ex), size=min(n, len(ex)), replace=False))
    strata = {k: np.asarray(v)[pick] for k, v in ex.strata.items()}
    return (np.asarray(ex.ids)[pick].astype(np.int64),
            np.asarray(ex.labels)[pick].astype(np.int64), strata)


def correct(logits, labels: np.ndarray, output_ids=None) -> np.ndarray:
    """(n,) bool: every scored position's argmax among the output ids (`output_ids`, the
    task's `Task.output_ids`; None: every token) equals its label: the rule training scores
    with (`study/core/outputs.py`). `logits` (n, pos, vocab), labels (n, pos)."""
    logits = np.asarray(logits)
    outputs = Outputs.of(output_ids, logits.shape[-1])
    return np.asarray(outputs.right(logits, np.asarray(labels)))
