"""The task's output space on a device, for the analyses: the rule of `study/core/outputs.py`
(which logits count, when a row is right) on torch tensors.

Every analysis that scores a network's answers scores them as training does: the argmax
among the task's output ids (`Task.output_ids`), and the cross entropy over those logits
only (DAS's loss). `Outputs.of(task, device)` is made once per analysis and carried by the
pairs (`study.analyses.common.interchange.PairTensors.outputs`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from study.core import outputs as rule
from study.core.labels import IGNORE


@dataclass(frozen=True)
class Outputs:
    """The output ids' columns and the labels' column index on one device (None: every
    token is scored)."""

    columns: torch.Tensor | None = None  # (n_out,) the output ids
    index: torch.Tensor | None = None  # (V + 1,) token id -> column, IGNORE outside

    @classmethod
    def of(cls, space, device) -> "Outputs":
        """From a task (its `output_ids`), a `study.core.outputs.OutputSpace`, or None (every
        token)."""
        if space is not None and not isinstance(space, rule.OutputSpace):
            if getattr(space, "output_ids", None) is None:  # a task scoring every token
                return cls()
            space = rule.OutputSpace.of_task(space)
        if space is None or space.whole:
            return cls()
        t = lambda v: torch.as_tensor(v, dtype=torch.long, device=device)  # noqa: E731
        return cls(t(space.ids), t(space.column_index()))

    def to(self, device) -> "Outputs":
        if self.columns is None:
            return self
        return Outputs(self.columns.to(device), self.index.to(device))

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) -> (..., n_out): the scored logits."""
        return rule.scored_logits(logits, self.columns)

    def targets(self, labels: torch.Tensor) -> torch.Tensor:
        """(...) token ids or IGNORE -> (...) columns among the scored logits, or IGNORE."""
        return labels if self.index is None else rule.target_columns(labels, self.index)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Cross entropy of the softmax over the output ids: logits (m, V), labels (m,)."""
        return F.cross_entropy(self.logits(logits.float()), self.targets(labels),
                               ignore_index=IGNORE, reduction=reduction)

    def right(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(n, pos, V), (n, pos) -> (n,) bool: every scored position right (`rule.rows_right`)."""
        return rule.rows_right(logits, labels, self.columns)

    def rows_right(self, logits: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor,
                   n: int) -> torch.Tensor:
        """`right` from the scored positions only: logits (m, V) and labels (m,) of the scored
        positions, rows (m,) the row each belongs to -> (n,) bool (rows with none: right)."""
        wrong = (~rule.positions_right(logits, labels, self.columns)).to(torch.int32)
        return torch.zeros(n, dtype=torch.int32, device=logits.device).index_add_(0, rows, wrong) == 0
