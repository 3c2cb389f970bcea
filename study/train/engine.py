"""One optimiser update: the model, AdamW and the (optionally compiled) forward + loss.

The training loop and the training benchmark both drive this object, so the benchmark times
exactly what training runs."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from study.core.labels import IGNORE
from study.core.network import takes_readout
from study.train.config import TrainConfig
from study.train.runtime import Runtime


class Engine:
    """Model + optimiser + the compiled forward/loss: `step(ids, targets, lr)` is one update."""

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, runtime: Runtime):
        self.model, self.cfg, self.runtime = model, cfg, runtime
        self.params = [p for p in model.parameters() if p.requires_grad]
        extra = {"fused": True} if runtime.device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=tuple(cfg.betas),
                                           weight_decay=cfg.weight_decay, **extra)
        self._impl = {k: self.optimizer.defaults[k] for k in ("fused", "foreach")}
        # compiled graphs want static shapes, so only the eager path reads out scored positions
        self._readout = not runtime.compiled and takes_readout(model)
        self._loss = (torch.compile(self._forward_loss, dynamic=False) if runtime.compiled
                      else self._forward_loss)

    def load_optimizer(self, saved: dict) -> None:
        """Restore a saved optimiser state; the kernel choice (fused/foreach) stays this
        device's, since a state saved on CUDA may resume on the CPU and back."""
        self.optimizer.load_state_dict(saved)
        for group in self.optimizer.param_groups:
            group.update(self._impl)

    def _forward_loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids, (B, L) targets (IGNORE where unscored) -> scalar mean CE."""
        if self._readout:  # eager: the output layer runs only where the loss looks
            mask = targets != IGNORE  # (B, L)
            with self.runtime.autocast():
                logits = self.model(ids, readout=mask)  # (n_scored, V)
            return F.cross_entropy(logits.float(), targets[mask])
        with self.runtime.autocast():
            logits = self.model(ids)  # (B, L, V)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE)

    def step(self, ids: torch.Tensor, targets: torch.Tensor, lr: float):
        """One update on (B, L) ids and targets; returns (loss, grad norm or None) as 0-d
        device tensors, unread, so that the host does not wait for the device."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss = self._loss(ids, targets)
        loss.backward()
        norm = (torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
                if self.cfg.grad_clip > 0 else None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), norm
