"""One optimiser update: the model, AdamW and the (optionally compiled) forward + loss.

The training loop and the training benchmark both drive this object, so the benchmark times
exactly what training runs. The forward is teacher-forced or free-running
(`train.feed_outputs`, `feed.py`); the loss is over the task's output vocabulary
(`study/core/outputs.py`)."""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from study.core.labels import IGNORE
from study.core.network import takes_readout
from study.train.config import TrainConfig
from study.train.feed import free_logits, runs_free, takes_feed
from study.core.outputs import Outputs
from study.train.runtime import Runtime

_log = logging.getLogger(__name__)


class Engine:
    """Model + optimiser + the compiled forward/loss: `step(ids, targets, feed, lr)` is one
    update. `output_ids`: the task's scored token ids (None: all) of its `vocab_size`."""

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, runtime: Runtime,
                 output_ids=None, vocab_size: int = 0):
        self.model, self.cfg, self.runtime = model, cfg, runtime
        self.free, self._native_feed = runs_free(cfg.feed_outputs, model), takes_feed(model)
        self.outputs = Outputs.of(output_ids, vocab_size, runtime.device)
        self.params = [p for p in model.parameters() if p.requires_grad]
        extra = {"fused": True} if runtime.fused else {}
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=tuple(cfg.betas),
                                           weight_decay=cfg.weight_decay, **extra)
        self._impl = {k: self.optimizer.defaults[k] for k in ("fused", "foreach")}
        # compiled graphs want static shapes, so only the eager path reads out scored positions
        self._readout = not runtime.compiled and takes_readout(model)
        # the fixed-point passes of a network without `feed=` stop on data: not compiled
        compiled = runtime.compiled and (not self.free or self._native_feed)
        # CUDA graphs [ours]: a step of a small network is a few hundred kernels of a few
        # microseconds each, so launching them costs more than running them; replaying the
        # captured forward and backward removes the launches (torch.compile's reduce-overhead)
        self.graphs = compiled and runtime.cuda_graphs
        mode = "reduce-overhead" if self.graphs else None
        self._loss = (torch.compile(self._forward_loss, dynamic=False, mode=mode) if compiled
                      else self._forward_loss)
        self._first_compiled_call = compiled
        self.compiled = compiled  # False again if compiling failed and training went eager

    def load_optimizer(self, saved: dict) -> None:
        """Restore a saved optimiser state; the kernel choice (fused/foreach) stays this
        device's, since a state saved on CUDA may resume on the CPU and back."""
        self.optimizer.load_state_dict(saved)
        for group in self.optimizer.param_groups:
            group.update(self._impl)

    def _logits(self, ids, feed, readout=None):
        if self.free:
            return free_logits(self.model, ids, feed, readout, self._native_feed)
        return self.model(ids) if readout is None else self.model(ids, readout=readout)

    def _forward_loss(self, ids: torch.Tensor, targets: torch.Tensor,
                      feed: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids, (B, L) targets (IGNORE where unscored), (B, L) bool fed
        positions -> scalar mean CE over the output vocabulary."""
        out = self.outputs
        if self._readout:  # eager: the output layer runs only where the loss looks
            mask = targets != IGNORE  # (B, L)
            with self.runtime.autocast():
                logits = self._logits(ids, feed, readout=mask)  # (n_scored, V)
            return F.cross_entropy(out.logits(logits.float()), out.targets(targets[mask]),
                                   ignore_index=IGNORE)
        with self.runtime.autocast():
            logits = self._logits(ids, feed)  # (B, L, V)
        return F.cross_entropy(out.logits(logits.float()).flatten(0, 1),
                               out.targets(targets).flatten(), ignore_index=IGNORE)

    def step(self, ids: torch.Tensor, targets: torch.Tensor, feed: torch.Tensor | None = None,
             lr: float | None = None):
        """One update at learning rate `lr` on (B, L) ids, targets and fed positions
        (`feed.feed_mask`, read when running free; None: none fed); returns (loss, grad norm
        or None) as 0-d device tensors, unread, so that the host does not wait for the
        device."""
        if lr is None:
            raise TypeError("Engine.step needs lr")
        if feed is None:
            feed = torch.zeros_like(ids, dtype=torch.bool)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.graphs:  # a new step: the previous replay's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        loss = self._compiled_or_eager(ids, targets, feed)
        loss.backward()
        norm = (torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
                if self.cfg.grad_clip > 0 else None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        # a replayed graph's output lives in its static memory, rewritten by the next replay
        loss = loss.detach().clone() if self.graphs else loss.detach()
        return loss, norm

    def _compiled_or_eager(self, ids, targets, feed):
        """The forward + loss; the first compiled call compiles, and if compiling fails (no
        C++ compiler for inductor, an unsupported op) training goes on eagerly after one line
        on stderr naming the cause [ours]. The eager result is the same computation."""
        if not self._first_compiled_call:
            return self._loss(ids, targets, feed)
        self._first_compiled_call = False
        try:
            return self._loss(ids, targets, feed)
        except Exception as err:  # noqa: BLE001 - any compiler failure falls back
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            _log.info(f"train.compile: torch.compile failed ({type(err).__name__}: {first}); "
                      f"training continues without it")
            self._loss, self.compiled, self.graphs = self._forward_loss, False, False
            self._readout = takes_readout(self.model)  # as an eager run from the start
            self.optimizer.zero_grad(set_to_none=True)
            return self._loss(ids, targets, feed)
