"""The training engine's view of the task's output space: the rule of `study/core/outputs.py`
(which logits the loss and the accuracy look at, when an example is right) on device tensors.

The loss is the cross entropy of the softmax over the output ids' logits only, and a
prediction is the argmax among them, mapped back to its token id. Labels outside the output
vocabulary (only possible with `train.loss_on=all`) are left unscored. The analyses score
with the same rule (`study.analyses.common.interchange`, `study.analyses.common.data`).
"""
from __future__ import annotations

import torch

from study.core import outputs as rule


class OutputSpace:
    """Restricts (..., V) logits to the task's output ids and maps labels into that space."""

    def __init__(self, output_ids, vocab_size: int, device: torch.device):
        self.space = rule.OutputSpace.of(output_ids, vocab_size)
        self.all = self.space.whole
        self.ids = None  # (n_out,) the output ids on the device; None: every token
        if not self.all:
            self.ids = torch.as_tensor(self.space.ids, dtype=torch.long, device=device)
            self.index = torch.as_tensor(self.space.column_index(), dtype=torch.long,
                                         device=device)  # (V + 1,)

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) -> (..., n_out): the scored columns."""
        return rule.scored_logits(logits, self.ids)

    def targets(self, labels: torch.Tensor) -> torch.Tensor:
        """(...) token ids or IGNORE -> (...) indices into the scored columns, or IGNORE."""
        return labels if self.all else rule.target_columns(labels, self.index)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) -> (...) token id of the argmax among the scored columns."""
        return rule.predict(logits, self.ids)

    def right(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(b, L, V), (b, L) -> (b,) bool: every scored position's prediction is its label."""
        return rule.rows_right(logits, labels, self.ids)
