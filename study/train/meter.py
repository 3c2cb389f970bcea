"""The training loss between log rows, summed on the device: reading a loss back every step
would make the host wait for the device every step."""
from __future__ import annotations

import torch


class LossMeter:
    """Sums of loss and grad norm on the device since the last log row."""

    def __init__(self, device, saved: dict | None = None):
        saved = saved or {}  # the pending sums of an interrupted run, from `state()`
        self.loss = torch.tensor(saved.get("loss", 0.0), dtype=torch.float32, device=device)  # 0-d
        self.norm = torch.tensor(saved.get("norm", 0.0), dtype=torch.float32, device=device)  # 0-d
        self.count = int(saved.get("count", 0))

    def add(self, loss: torch.Tensor, norm: torch.Tensor | None) -> None:
        """Add one step's 0-d loss and grad norm (None when clipping is off)."""
        self.loss += loss
        if norm is not None:
            self.norm += norm.float()
        self.count += 1

    def state(self) -> dict:
        """The pending sums as plain numbers (reads the device)."""
        return {"loss": self.loss.item(), "norm": self.norm.item(), "count": self.count}

    def flush(self, step: int, lr: float, clip: bool) -> list[tuple]:
        """Metric rows of the means since the last flush (loss first), and start over."""
        n = max(1, self.count)
        rows = [(step, "train", "all", "loss", self.loss.item() / n),
                (step, "train", "all", "lr", lr)]
        if clip:
            rows.append((step, "train", "all", "grad_norm", self.norm.item() / n))
        self.loss.zero_()
        self.norm.zero_()
        self.count = 0
        return rows
