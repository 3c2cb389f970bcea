"""How a model family is declared, and the shared vocabulary of intervention sites.

A family is registered from a torch-free file in `models/` (so `study list` starts without
importing torch): its frozen config dataclass, presets per scale, capabilities and an
analytic parameter count. The registered object is a builder
`build(config, vocab_size, seq_len) -> nn.Module` that imports its network from
`models/nets/` lazily.

Sites (docs/analyses.md): every network exposes the places analyses intervene on as identity hook
modules under `model.sites`, so pyvene addresses them by path
(`"sites.resid[3].output"`) and a hand-written hook sees the same tensor:

| site kind  | module path          | hook output shape     | meaning                                  |
|------------|----------------------|-----------------------|------------------------------------------|
| `resid`    | `sites.resid[l]`     | (batch, pos, d_model) | residual stream entering layer l; l = n_layers is the final stream |
| `attn_out` | `sites.attn_out[l]`  | (batch, pos, d_model) | attention block output of layer l        |
| `mlp_out`  | `sites.mlp_out[l]`   | (batch, pos, d_model) | MLP block output of layer l (if any)     |
| `head`     | `sites.head[l]`      | (batch, pos, n_heads * d_head) | per-head attention outputs before the output projection, head h in features [h*d_head, (h+1)*d_head) |
| `state`    | `sites.state[t]`     | (batch, d_state)      | recurrent state after token t (LSTM: [h, c]) |

`site_shapes(model)` lists what a built network offers; `n_layers`/`n_steps` bound the index.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Capabilities a family may declare; analyses declare the ones they require.
CAPABILITIES = ("attention", "recurrent", "residual", "heads")


@dataclass(frozen=True)
class SiteKind:
    """One kind of site a network exposes: its module-list name and the width of one unit."""

    name: str  # resid | attn_out | mlp_out | head | state
    count: int  # number of modules in `model.sites.<name>` (layers, or time steps)
    width: int  # features per position (head: n_heads * d_head)


def build_model(entry, config, vocab_size: int, seq_len: int):
    """Build the torch network of a registered model entry for a task's vocabulary/length."""
    builder: Callable = entry.obj
    return builder(config, vocab_size, seq_len)
