"""Evaluation during training: accuracy and loss on every eval split, overall and per stratum,
and the early-stopping test on those accuracies.

Regime: free-running for every family, as Grant et al. validate (`grantsrb/mas/train.py`,
validation loop: `tforce=False`): after each scored position the model reads its own
argmax (`feed.py`). The accuracy (every scored position right) is the same event under
teacher forcing; the loss is the free-running one. Loss and argmax are over the task's
output vocabulary (`study/core/outputs.py`)."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from study.core.labels import IGNORE
from study.train.config import TrainConfig
from study.train.feed import feed_mask, free_logits
from study.core.outputs import Outputs
from study.train.runtime import Runtime
from study.train.streams import to_width, used_length


class Evaluator:
    """Accuracy (every scored position right) and loss (mean CE over scored positions) on
    every eval split, overall ("all") and per stratum ("depth=3"); splits live on the device.
    `outputs`: the task's output vocabulary (default: every token).

    The results of every split stay on the device until all are computed, then come back
    together: on a GPU a small network's evaluation is bound by kernel launches and host waits,
    so there a forward pass also takes as many sequences as fit about `_TOKENS` positions. On
    the CPU batches stay small, where they run fastest."""

    _TOKENS = 1 << 17  # positions per forward pass on a GPU [ours]

    def __init__(self, task, cfg: TrainConfig, runtime: Runtime,
                 outputs: Outputs | None = None):
        self.runtime, self.splits = runtime, {}
        self.outputs = outputs or Outputs()  # None: every token scored
        self.batch = max(256, cfg.batch_size)
        for name in task.eval_splits:
            ex = task.split(name)
            if cfg.eval_examples and cfg.eval_examples < len(ex):
                ex = ex.take(spread(len(ex), cfg.eval_examples))
            L = used_length(ex.ids, ex.labels, task.pad_id)
            groups = [("all", np.ones(len(ex), bool))]
            for key, values in ex.strata.items():
                for v in np.unique(values):
                    groups.append((f"{key}={_plain(v)}", values == v))
            self.splits[name] = (torch.from_numpy(to_width(ex.ids, L, task.pad_id)).to(runtime.device),  # (n, L)
                                 torch.from_numpy(to_width(ex.labels, L, IGNORE)).to(runtime.device),  # (n, L)
                                 groups)

    def _rows(self, length: int) -> int:
        """Sequences per forward pass at this length."""
        if self.runtime.device.type == "cuda":
            return max(self.batch, self._TOKENS // max(length, 1))
        return self.batch

    @torch.no_grad()
    def __call__(self, model, step: int) -> list[tuple]:
        """Metric rows (step, split, stratum, "accuracy" | "loss", value)."""
        rows, out, pending = [], self.outputs, []
        with eval_mode(model), self.runtime.autocast():
            for name, (ids, labels, groups) in self.splits.items():
                correct, loss, count = [], [], []
                size = self._rows(ids.shape[1])
                for a in range(0, len(ids), size):
                    x, y = ids[a:a + size], labels[a:a + size]  # (b, L)
                    logits = free_logits(model, x, feed_mask(y)).float()  # (b, L, V)
                    ce = F.cross_entropy(out.logits(logits).transpose(1, 2), out.targets(y),
                                         ignore_index=IGNORE, reduction="none")  # (b, L)
                    correct.append(out.right(logits, y))  # (b,) every scored position right
                    loss.append(ce.sum(-1))
                    count.append((y != IGNORE).sum(-1))
                pending.append((name, groups, correct, loss, count))
        for name, groups, *parts in pending:  # the first read-back waits for all of them
            correct, loss, count = (torch.cat(t).cpu().numpy() for t in parts)  # (n,)
            scored = count > 0
            for stratum, mask in groups:
                m = mask & scored
                if m.any():
                    rows.append((step, name, stratum, "accuracy", float(correct[m].mean())))
                    rows.append((step, name, stratum, "loss", float(loss[m].sum() / count[m].sum())))
        return rows


@contextmanager
def eval_mode(model):
    """The model in eval mode (no dropout) for the block, then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def overall(rows: list[tuple], step: int) -> dict[str, float]:
    """{split: overall accuracy} of the eval rows at `step`."""
    return {r[1]: r[4] for r in rows if r[0] == step and r[2] == "all" and r[3] == "accuracy"
            and r[1] != "train"}


def latest_overall(rows: list[tuple]) -> dict[str, float]:
    """{split: overall accuracy} at the newest evaluated step ({} before any evaluation)."""
    return overall(rows, max((r[0] for r in rows if r[1] != "train"), default=0))


def reached(acc: dict[str, float], target: float | None) -> bool:
    """Early-stop test, on the validation split only: `val` where it is evaluated, else every
    eval split but the test and generalisation sets ("test", "heldout*", "gen*") [ours: a
    run stopped when its test accuracy reaches the bar is selected on the split it is then
    judged on]. Nothing to gate on: never reached."""
    gate = ({"val": acc["val"]} if "val" in acc else
            {k: v for k, v in acc.items() if not k.startswith(("test", "heldout", "gen"))})
    return target is not None and bool(gate) and all(v >= target for v in gate.values())


def spread(n: int, k: int) -> np.ndarray:
    """k of n indices, evenly spaced over the whole split (k < n): a split stacked from parts
    (assign_add's `test`, the nine pools one after another) keeps every part in proportion,
    where its first k examples would be one pool only."""
    return np.linspace(0, n - 1, k).round().astype(np.int64)  # strictly increasing for k < n
