"""The output space: which logits a task's answers are scored over, and when an example is right.

One rule for training and for every analysis (patching, DAS, stitching, head ablation). A task
declares `output_ids` (`Task.output_ids`: token ids, or None for every token):

- the scored logits are the columns `output_ids`, in that order (`scored_logits`); the loss
  is the cross entropy of the softmax over them, each label mapped to its column
  (`target_columns`; a label outside the output vocabulary is left unscored);
- a position's prediction is the token id of the argmax among them (`predict`; a tie goes to
  the first column), never a token outside the output vocabulary, however large its logit;
- a position is right when its prediction equals its label; a position labelled IGNORE is
  unscored and counts as right (`positions_right`); an example is right when every position
  is (`rows_right`).

Exoo et al. (2026) score assign_add's 59 number logits only (`bexoo/assign-and-add`
train.py: `logits[:, -1, :MOD]`); a network whose unembedding covers the whole vocabulary
trains on those columns alone, and its other logits, which get no gradient, must not win an
analysis's argmax either.

`Outputs` is the one output-space type, for training and for every analysis: the output ids'
columns and the labels' column index, as arrays of the library and on the device of the
logits they score (numpy arrays without a device, torch tensors on one), made once from the
task (`Outputs.of_task`) or its output ids (`Outputs.of`). The rule's functions take logits
and labels of any array library with numpy's indexing and import none; torch is imported
only to put an `Outputs` on a device and for the cross entropy (`Outputs.loss`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from study.core.labels import IGNORE


@dataclass(frozen=True)
class Outputs:
    """A task's output vocabulary, ready to score logits: `columns` (n_out,) the output ids in
    column order and `index` (V + 1,) each token id's column (IGNORE outside the output
    vocabulary, and once more in the last entry, where a label IGNORE (-1) indexes); both None
    when every token is scored. Arrays of the logits' library, on their device."""

    columns: Any = None
    index: Any = None

    @classmethod
    def of(cls, output_ids, vocab_size: int, device=None) -> "Outputs":
        """From a task's `output_ids` (None: every token) within `vocab_size` tokens: numpy
        arrays for `device` None, else torch tensors on `device`. Output ids equal to the whole
        vocabulary in order score every token. ValueError on an id outside the vocabulary."""
        if output_ids is None:
            return cls()
        ids = tuple(int(i) for i in output_ids)
        if not ids or min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"output_ids must be token ids in 0..{vocab_size - 1}")
        if len(set(ids)) != len(ids):
            raise ValueError("output_ids must not repeat a token id")
        if ids == tuple(range(vocab_size)):
            return cls()
        index = [IGNORE] * vocab_size
        for col, tok in enumerate(ids):
            index[tok] = col
        return cls(ids, tuple(index) + (IGNORE,)).to(device)

    @classmethod
    def of_task(cls, task, device=None) -> "Outputs":
        """The output space of a task (`task.output_ids` within `task.vocab`; a task without
        `output_ids` scores every token, `Task.output_ids`'s default; None: every token)."""
        if task is None or getattr(task, "output_ids", None) is None:
            return cls()
        return cls.of(task.output_ids, len(task.vocab), device)

    @property
    def whole(self) -> bool:
        """Whether every token is scored (the argmax over all logits)."""
        return self.columns is None

    def to(self, device) -> "Outputs":
        """The same output space as arrays on `device` (None: numpy)."""
        if self.columns is None:
            return self
        if device is None:
            import numpy as np
            return Outputs(np.asarray(self.columns, dtype=np.int64),
                           np.asarray(self.index, dtype=np.int64))
        import torch
        t = lambda v: torch.as_tensor(v, dtype=torch.long, device=device)  # noqa: E731
        return Outputs(t(self.columns), t(self.index))

    def logits(self, logits):
        """(..., V) -> (..., n_out): the scored logits."""
        return scored_logits(logits, self.columns)

    def targets(self, labels):
        """(...) token ids or IGNORE -> (...) columns among the scored logits, or IGNORE."""
        return labels if self.index is None else target_columns(labels, self.index)

    def predict(self, logits):
        """(..., V) -> (...) the token id of the argmax among the output ids."""
        return predict(logits, self.columns)

    def right(self, logits, labels):
        """(n, pos, V), (n, pos) -> (n,) bool: every scored position right (`rows_right`)."""
        return rows_right(logits, labels, self.columns)

    def rows_right(self, logits, labels, rows, n: int):
        """`right` from the scored positions only: torch logits (m, V) and labels (m,) of the
        scored positions, rows (m,) the row each belongs to -> (n,) bool (rows with none:
        right)."""
        import torch
        wrong = (~positions_right(logits, labels, self.columns)).to(torch.int32)
        return torch.zeros(n, dtype=torch.int32, device=logits.device).index_add_(0, rows, wrong) == 0

    def loss(self, logits, labels, reduction: str = "mean"):
        """Cross entropy of the softmax over the output ids (torch): logits (m, V), labels
        (m,), the loss training and DAS minimise."""
        import torch.nn.functional as F
        return F.cross_entropy(self.logits(logits.float()), self.targets(labels),
                               ignore_index=IGNORE, reduction=reduction)


def scored_logits(logits, columns):
    """(..., V) -> (..., n_out): the logits of the output ids (all of them for None)."""
    return logits if columns is None else logits[..., columns]


def target_columns(labels, index):
    """(...) token ids or IGNORE -> (...) their columns among the scored logits, or IGNORE
    (unscored, also for a token outside the output vocabulary). `index`: `column_index()` as
    an array of the labels' library and device."""
    return index[labels]


def predict(logits, columns):
    """(..., V) -> (...) the token id of the argmax among the output ids."""
    if columns is None:
        return logits.argmax(-1)
    return columns[logits[..., columns].argmax(-1)]


def positions_right(logits, labels, columns):
    """(..., V), (...) -> (...) bool: the prediction equals the label, or the label is IGNORE
    (unscored)."""
    return (predict(logits, columns) == labels) | (labels == IGNORE)


def rows_right(logits, labels, columns):
    """(n, pos, V), (n, pos) -> (n,) bool: every position of the row is right (a row with no
    scored position counts as right)."""
    return positions_right(logits, labels, columns).all(-1)
