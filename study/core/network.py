"""What the training stage and the analyses may assume of a network, whatever its family.

Every network the model registry builds is an `nn.Module` called as `model(ids)` with `ids`
(batch, pos) long, returning logits (batch, pos, vocab); `model(ids, readout=mask)` with
`mask` (batch, pos) bool returns only the scored rows, (n_true, vocab).
"""
from __future__ import annotations

import functools
import inspect


def takes_readout(model) -> bool:
    """Whether `model(ids, readout=mask)` is supported (the library's networks all accept it)."""
    return _class_takes_readout(type(model))


@functools.lru_cache(maxsize=None)
def _class_takes_readout(cls) -> bool:  # read once per class: DAS asks at every step
    return "readout" in inspect.signature(cls.forward).parameters
