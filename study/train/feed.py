"""Free-running: feeding a network its own outputs where the task scores them.

Grant, Goodman & McClelland (2025) train their RNNs free-running in the response phase and
their transformers teacher-forced (`grantsrb/mas/make_models/make_model_training_files.py`:
`tforce_train=False` for GRU/LSTM, `True` for the transformer), and validate every model
free-running (`grantsrb/mas/train.py`, validation loop: `tforce=False`). In their loop
(`grantsrb/mas/seq_models.py`, `RNN.forward`) the input at position t is the embedding of
the model's argmax at t-1 wherever the task mask of t is set, i.e. wherever the *true*
token at t is one the model was asked to predict (the responses and the EOS); elsewhere
the true token. The argmax is an index, so no gradient flows through the choice; it does
flow through the embedding of the chosen token.

Task-agnostic form here: the task's scored positions (labels != IGNORE) say where the
model is asked for the next token, so position t is fed when t-1 is scored (`feed_mask`).
[ours] A fed position after the last scored one changes no scored output and is left
teacher-forced (the authors feed the EOS input too; its output is unscored there as well).

A network that takes `feed=` (the recurrent families, `study/models/nets/rnn.py`) runs free in
one unroll. Any other network is run to the fixed point (`free_logits`): a causal model's
fed tokens settle left to right, one per pass, so at most (fed positions) passes without
gradients, then one pass with gradients on the settled inputs; a right model settles on
the first pass. [ours] In training mode each pass draws its own dropout masks, so there the
fed tokens come from the no-gradient passes; the recurrent families have no such gap.

Accuracy (every scored position right) is the same event free-running or teacher-forced:
when every prediction is right the fed tokens are the true ones. Only the loss differs.
"""
from __future__ import annotations

import functools
import inspect

import torch

from study.core.errors import UsageError
from study.core.fixed_point import settle_inputs
from study.core.labels import IGNORE

FEED_MODES = ("auto", "teacher", "free")


def runs_free(mode: str, model) -> bool:
    """Whether training feeds the model its own outputs: `free`, `teacher`, or `auto` —
    free-running for recurrent families (declared capability `recurrent`), teacher forcing
    for the others [authors]."""
    if mode not in FEED_MODES:
        raise UsageError(f"train.feed_outputs={mode!r}: choose from {', '.join(FEED_MODES)}")
    if mode == "auto":
        return "recurrent" in getattr(model, "capabilities", ())
    return mode == "free"


def feed_mask(labels: torch.Tensor) -> torch.Tensor:
    """(n, L) labels -> (n, L) bool: position t takes the model's own output when t-1 is
    scored and some position >= t is scored."""
    scored = labels != IGNORE  # (n, L)
    feed = torch.zeros_like(scored)
    feed[:, 1:] = scored[:, :-1]
    later = scored.flip(1).cumsum(1).flip(1) > 0  # scored at t or after
    return feed & later


def takes_feed(model) -> bool:
    """Whether `model(ids, feed=mask)` runs free natively."""
    return _class_takes_feed(type(model))


@functools.lru_cache(maxsize=None)
def _class_takes_feed(cls) -> bool:
    return "feed" in inspect.signature(cls.forward).parameters


def _call(model, ids, readout):
    return model(ids) if readout is None else model(ids, readout=readout)


def settle(model, ids: torch.Tensor, feed: torch.Tensor) -> torch.Tensor:
    """(B, L) ids with every fed position replaced by the model's free-running argmax,
    computed without gradients by passes to the fixed point."""
    if not bool(feed.any()):
        return ids
    # as many passes as fed positions: a causal model has settled by then, confirmed or not
    settled, _ = settle_inputs(lambda x: _call(model, x, None).argmax(-1), ids, feed,
                               int(feed.sum(1).max()))
    return settled


def free_logits(model, ids: torch.Tensor, feed: torch.Tensor,
                readout: torch.Tensor | None = None, native: bool | None = None) -> torch.Tensor:
    """Free-running logits: (B, L, V), or (n_true, V) at the `readout` (B, L) positions.
    `native`: `takes_feed(model)`, given by callers that compile this (no lookup traced)."""
    if takes_feed(model) if native is None else native:
        if readout is None:
            return model(ids, feed=feed)
        return model(ids, readout=readout, feed=feed)
    return _call(model, settle(model, ids, feed), readout)
