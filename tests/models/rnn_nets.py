"""The recurrent networks the recurrent-family tests share: a smoke network of each cell over
a small vocabulary, token ids, and every state site's output read by plain hooks."""
from __future__ import annotations

import torch

from study.models.base import build_model
from study.models.nets.rnn import RecurrentLM
from study.core.registry import get
from tests.conftest import project_entries

VOCAB, SEQ = 7, 9
CELLS = [n for n, e in project_entries("model").items() if "recurrent" in e.capabilities]


def smoke_net(cell: str, seed: int = 0) -> RecurrentLM:
    torch.manual_seed(seed)
    config = get("model", cell).make_config("smoke")
    return build_model(get("model", cell), config, VOCAB, SEQ).eval()


def token_ids(batch: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, SEQ), generator=g)  # (batch, SEQ)


def states_of(model, ids, patch=None):
    """Logits and every state site's output; `patch` = (t, fn) replaces state[t]'s output."""
    seen = {}
    handles = []
    for t, site in enumerate(model.sites.state):
        def hook(_m, _a, y, t=t):
            if patch is not None and patch[0] == t:
                y = patch[1](y)
            seen[t] = y.detach().clone()
            return y
        handles.append(site.register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for h in handles:
            h.remove()
    return logits, torch.stack([seen[t] for t in range(ids.shape[1])], dim=1)  # (b, pos, d)


def hook_snapshot(model):
    return [(name, dict(m._forward_hooks), dict(m._forward_pre_hooks))
            for name, m in model.named_modules()]
