"""Identity hook modules that make every intervention site addressable by path.

A `Site` returns its input unchanged; it exists so that pyvene (by module path, e.g.
`"sites.resid[2].output"`) and plain forward hooks see exactly the tensor an analysis means.
They cost nothing at training time and survive `torch.compile`. The kinds and their hook
shapes are listed in `study/models/sites/__init__.py`.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as _torch_module

from study.models.sites import KINDS


class Site(nn.Module):
    """y = x. Hooks registered on this module read or replace the site's activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Sites(nn.Module):
    """`model.sites`: one ModuleList of `Site`s per site kind, e.g. sites.resid[l]."""

    def __init__(self, **counts: int):
        super().__init__()
        unknown = [name for name in counts if name not in KINDS]
        if unknown:
            raise ValueError(f"unknown site kinds {unknown}; the kinds are {', '.join(KINDS)}")
        for name, count in counts.items():
            setattr(self, name, nn.ModuleList(Site() for _ in range(count)))

    def kinds(self) -> dict[str, int]:
        """{kind: number of modules}."""
        return {name: len(mods) for name, mods in self.named_children()}

    def hooked(self, kind: str) -> bool:
        """Whether anything reads or replaces a site of `kind`: a forward (pre-)hook on one
        of its modules, or a global module hook. A network may then skip the kind's sites
        (a fused kernel) only when this is False."""
        if _torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks:
            return True
        return any(site._forward_hooks or site._forward_pre_hooks
                   for site in getattr(self, kind, ()))
