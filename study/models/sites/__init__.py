"""The torch side of the site vocabulary: the hook modules, reading activations, and pyvene.

The vocabulary itself (site kinds, hook shapes, `SiteKind`, labels, `check_site`,
`default_sites`) is torch-free and lives in `study/core/sites.py`; the capability table that
says which kinds a family offers is `study.core.network.CAPABILITIES`. This package holds
what needs torch:
- `study.models.sites.modules`: the `Site` / `Sites` identity modules under `model.sites`;
- `study.models.sites.capture`: reading activations (`hooked`, `collect`, `grouped_collect`,
  `capture`, `gather_site`, `state_at`, `site_widths`);
- `study.models.sites.cache`: every site's activation and the attention patterns of one
  forward, by site name (`Run.cache`);
- `study.models.sites.pyvene_bridge`: the one intervention path, through pyvene (patching,
  DAS, stitching and head ablation all run through it), with our interventions in
  `study.models.sites.pyvene_interventions` and the lazy import in
  `study.models.sites.pyvene_loader`.

The names of `study.core.sites` are importable from here too (the networks import them with
the rest of the package); this module defines none of them. It stays torch-free itself.
"""
from __future__ import annotations

from study.core.network import declared_kinds
from study.core.sites import (HOOK_SHAPES, KINDS, SEQUENCE_KINDS, STEP_KINDS, SiteKind,
                              check_site, default_sites, transformer_site_kinds)

__all__ = ["HOOK_SHAPES", "KINDS", "SEQUENCE_KINDS", "STEP_KINDS", "SiteKind", "check_site",
           "declared_kinds", "default_sites", "transformer_site_kinds"]
