"""Identity hook modules that make every intervention site addressable by path.

A `Site` returns its input unchanged; it exists so that pyvene (by module path, e.g.
`"sites.resid[2].output"`) and plain forward hooks see exactly the tensor an analysis means.
They cost nothing at training time and survive `torch.compile`.
"""
from __future__ import annotations

import torch
from torch import nn


class Site(nn.Module):
    """y = x. Hooks registered on this module read or replace the site's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Sites(nn.Module):
    """`model.sites`: one ModuleList of `Site`s per site kind, e.g. sites.resid[l]."""

    def __init__(self, **counts: int):
        super().__init__()
        for name, count in counts.items():
            setattr(self, name, nn.ModuleList(Site() for _ in range(count)))

    def kinds(self) -> dict[str, int]:
        return {name: len(mods) for name, mods in self.named_children()}


def transformer_site_kinds(n_layers: int, d_model: int, head_width: int):
    """The site kinds of a transformer: resid (n_layers + 1), attn_out, mlp_out and head."""
    from models.base import SiteKind

    return [SiteKind("resid", n_layers + 1, d_model), SiteKind("attn_out", n_layers, d_model),
            SiteKind("mlp_out", n_layers, d_model), SiteKind("head", n_layers, head_width)]
