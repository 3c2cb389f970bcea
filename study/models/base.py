"""How a model family is declared and built.

A family is registered from a torch-free file in `study/models/` (so `study list` starts without
importing torch): its frozen config dataclass, presets per scale, capabilities (names from
`study.core.network.CAPABILITIES`) and an analytic parameter count. The registered object is
a builder `build(config, vocab_size, seq_len) -> nn.Module` that imports its network from
`models/nets/` lazily; the registry wraps it so that every network it builds carries the
family's capabilities and is checked against `study.core.network.Network`.

Every network exposes its intervention sites as identity modules under `model.sites`; the
site vocabulary (kinds, hook shapes, labels) is `study/core/sites.py`, the torch helpers that
read sites and intervene on them (through pyvene) are `models/sites`.
"""
from __future__ import annotations

from typing import Callable


def build_model(entry, config, vocab_size: int, seq_len: int):
    """Build the torch network of a registered model entry for a task's vocabulary/length."""
    builder: Callable = entry.obj
    return builder(config, vocab_size, seq_len)
