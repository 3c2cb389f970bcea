"""The output vocabulary a task scores: the logits the loss and the accuracy look at.

A task declares `output_ids` (token ids, or None for every token; `study/tasks/base.py`). The loss
is the cross entropy of the softmax over those logits only, and a prediction is the argmax
among them, mapped back to its token id. Exoo et al. (2026) score the 59 number logits
(`bexoo/assign-and-add` train.py: `logits[:, -1, :MOD]`); with output_ids = the numbers, a
network whose unembedding covers the whole vocabulary trains exactly as theirs would (the
other columns get no gradient from the loss). Labels outside the output vocabulary (only
possible with `train.loss_on=all`) are left unscored.
"""
from __future__ import annotations

import torch

from study.core.labels import IGNORE


class OutputSpace:
    """Restricts (..., V) logits to the task's output ids and maps labels into that space."""

    def __init__(self, output_ids, vocab_size: int, device: torch.device):
        self.all = output_ids is None or list(output_ids) == list(range(vocab_size))
        if not self.all:
            ids = torch.as_tensor(list(output_ids), dtype=torch.long)
            if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
                raise ValueError(f"output_ids must be token ids in 0..{vocab_size - 1}")
            self.ids = ids.to(device)  # (n_out,)
            self.index = torch.full((vocab_size,), IGNORE, dtype=torch.long, device=device)
            self.index[self.ids] = torch.arange(len(ids), device=device)  # (V,)

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) -> (..., n_out): the scored columns."""
        return logits if self.all else logits.index_select(-1, self.ids)

    def targets(self, labels: torch.Tensor) -> torch.Tensor:
        """(...) token ids or IGNORE -> (...) indices into the scored columns, or IGNORE."""
        if self.all:
            return labels
        return torch.where(labels == IGNORE, labels, self.index[labels.clamp(min=0)])

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) -> (...) token id of the argmax among the scored columns."""
        if self.all:
            return logits.argmax(-1)
        return self.ids[self.logits(logits).argmax(-1)]
