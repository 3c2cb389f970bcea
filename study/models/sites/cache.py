"""One forward pass with every site's activation recorded, by site name: `Run.cache`, our
counterpart of TransformerLens's `run_with_cache`, in the project's site vocabulary.

    logits, acts = run_with_cache(net, ids)            # ids (batch, pos) int64
    acts["resid[1]"], acts["pattern[0]"], acts["state"]

| name          | shape                          | what                                     |
|---------------|--------------------------------|------------------------------------------|
| `resid[l]`    | (batch, pos, d_model)          | residual stream entering layer l (l = n_layers: the final stream) |
| `attn_out[l]` | (batch, pos, d_model)          | attention block output of layer l        |
| `mlp_out[l]`  | (batch, pos, d_model)          | MLP block output of layer l              |
| `head[l]`     | (batch, pos, n_heads * d_head) | per-head outputs before W_O; head h: features h*d_head.. |
| `pattern[l]`  | (batch, n_heads, query, key)   | attention probabilities; rows sum to 1, causal |
| `state`       | (batch, pos, d_state)          | recurrent state after token t at [:, t] (LSTM: [h, c]) |

The site names and per-position shapes are the site vocabulary's (`study/core/sites.py`), read
through the one capture path (`study.models.sites.capture.capture`), so `acts[name][i, p]` is
the vector patching and DAS read and replace at that site and position; patterns come from
`study.models.nets.attention.capture_attention`, as the circuit scores read them. A network
offers the kinds of its family (transformers: resid, attn_out, mlp_out, head and pattern;
recurrent networks: state); a site its forward never computes (attn2 has no MLP in layer 0)
is left out of the full cache and refused when named.

Asking for patterns switches attention to its explicit softmax path for that call, whose
outputs equal the fused kernel's up to float rounding.
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Sequence

import numpy as np
import torch

from study.core.errors import UsageError
from study.core.sites import STEP_KINDS, site_label
from study.models.nets.attention import CausalAttention, capture_attention
from study.models.sites.capture import capture
from study.models.tokenizer import prompt_ids, shown

PATTERN = "pattern"


def site_table(model) -> dict[str, tuple[str, int]]:
    """name -> (kind, layer) of every site of `model`, patterns as ("pattern", layer)."""
    table = {}
    for kind, count in model.sites.kinds().items():
        layers = (0,) if kind in STEP_KINDS else range(count)
        table.update({site_label(kind, layer): (kind, layer) for layer in layers})
    n_attention = sum(isinstance(m, CausalAttention) for m in model.modules())
    table.update({f"{PATTERN}[{layer}]": (PATTERN, layer) for layer in range(n_attention)})
    return table


def input_ids(inputs, vocab: Sequence[str], pad_id: int, device="cpu",
              max_pos: int | None = None) -> torch.Tensor:
    """(batch, pos) int64 ids on `device` of `inputs`: prompts (see
    `study.models.tokenizer.prompt_ids`; rows right-padded with `pad_id` to the longest) or an
    integer id array / tensor (batch, pos). `max_pos`: the longest input the network takes
    (learned positions), None for any length."""
    if isinstance(inputs, (torch.Tensor, np.ndarray)):
        ids = torch.as_tensor(inputs)
        integer = not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
        if ids.dim() != 2 or not integer:
            raise UsageError(f"cache: an id tensor must be integer (batch, pos); got "
                             f"{ids.dtype} of shape {tuple(ids.shape)}")
        if ids.numel() == 0:
            raise UsageError(f"cache: the id tensor {tuple(ids.shape)} is empty")
        bad = ids[(ids < 0) | (ids >= len(vocab))]
        if len(bad):
            raise UsageError(f"cache: id {int(bad[0])} is not a token id; ids are 0.."
                             f"{len(vocab) - 1} ({shown(vocab)})")
        ids = ids.long()
    else:
        rows = prompt_ids(inputs, vocab, "cache")
        width = max(map(len, rows))
        ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)
    if max_pos is not None and ids.shape[1] > max_pos:
        raise UsageError(f"cache: inputs of {ids.shape[1]} tokens; this network has learned "
                         f"positions for at most {max_pos}")
    return ids.to(device)


def wanted_sites(model, sites) -> list[str]:
    """The site names asked (None: every site), each checked against the model's."""
    table = site_table(model)
    if sites is None:
        return list(table)
    names = [sites] if isinstance(sites, str) else list(sites)
    unknown = [n for n in names if n not in table]
    if unknown or not names:
        what = f"site {unknown[0]!r} is not" if unknown else "no sites are"
        raise UsageError(f"cache: {what} one of {type(model).__name__}'s; sites: "
                         f"{', '.join(table)}")
    return list(dict.fromkeys(names))


@torch.no_grad()
def run_with_cache(model, ids: torch.Tensor, sites=None) -> tuple[torch.Tensor, dict]:
    """(logits (batch, pos, vocab), {site name: activation}) of one forward of `model` on
    `ids` (batch, pos): every site (`sites=None`) or the named ones, shapes as in the table
    above, detached, on the model's device."""
    names = wanted_sites(model, sites)
    table = site_table(model)
    at = [table[n] for n in names if table[n][0] != PATTERN]
    with ExitStack() as stack:
        acts = stack.enter_context(capture(model, at))
        patterns = (stack.enter_context(capture_attention(model))
                    if any(table[n][0] == PATTERN for n in names) else [])
        logits = model(ids)
    out = {}
    for name in names:
        kind, layer = table[name]
        value = (patterns[layer] if layer < len(patterns) else None) if kind == PATTERN \
            else acts.get((kind, layer))
        if value is None:
            if sites is None:
                continue  # a site this network's forward never computes
            raise UsageError(f"cache: {type(model).__name__} never computes {name} (its "
                             f"forward skips that site); leave it out of sites=")
        out[name] = value.detach()
    return logits, out
