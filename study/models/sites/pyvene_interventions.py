"""pyvene interventions of our own: per-example row selection, patching, writing given values,
and ablation.

pyvene intervenes on every example of a batch at each representation it holds. Our recurrent
networks have one site per time step (`sites.state[t]`), and the pairs of a batch are
intervened at different steps, so the step kind's intervenable (`site_intervenable` in
`study/models/sites/pyvene_bridge.py`) holds one representation per step and tells each one which
examples are its own [ours]:

- `subspaces` of one representation may be a (batch,) bool tensor, the rows intervened on
  there; every other row passes through exactly unchanged (`gate_rows`). pyvene hands each
  representation's entry of `subspaces` to its intervention untouched, so this needs nothing
  of pyvene beyond its documented call. The alignments of `study/analyses/das/alignment.py` and
  `PatchIntervention` accept it and say so with the class attribute `takes_row_mask`.
- `PatchIntervention`: pyvene's vanilla interchange (the source vector replaces the base's),
  optionally only on the features [start, stop) (one attention head of a `head` site), with
  the row selection above. The `patching` analysis runs through it.
- `WriteIntervention`: each example's site vector becomes `write(vector, value)`, the values
  handed in per example as pyvene's source representations (any width): the cross-run
  stitching of `study/analyses/compare` writes another run's mapped coordinates into a
  subspace with it. Row selection as above.
- `AblateIntervention`: features [start, stop) of the site set to 0 or to given per-position
  values, at every position it is applied to (the `circuits` analysis' head ablation, run over
  the site's whole output: `study.models.sites.pyvene_run.run_sourceless`).

The classes live in an importable module, so `pyvene.IntervenableModel.load` can rebuild them
from the type names it saves.
"""
from __future__ import annotations

from typing import Callable

import torch

from study.models.sites.pyvene_loader import pyvene

pv = pyvene()


def is_row_mask(subspaces) -> bool:
    """Whether `subspaces` is our per-representation row selection, a (batch,) bool tensor."""
    return isinstance(subspaces, torch.Tensor) and subspaces.dtype == torch.bool


def gate_rows(base: torch.Tensor, source: torch.Tensor, subspaces,
              fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`fn(base, source)` on the rows `subspaces` selects ((batch,) bool tensor; None: every
    row); the other rows of `base` are returned as they are. base, source: (batch, ...)."""
    if subspaces is None:
        return fn(base, source)
    if not is_row_mask(subspaces) or subspaces.shape != base.shape[:1]:
        raise ValueError("subspaces: give a (batch,) bool tensor of the rows to intervene on")
    rows = subspaces.to(base.device).nonzero().squeeze(1)
    if len(rows) == 0:
        return base
    if len(rows) == len(base):
        return fn(base, source)
    return base.index_copy(0, rows, fn(base[rows], source[rows]).to(base.dtype))


class PatchIntervention(pv.VanillaIntervention):
    """Interchange: the source's vector replaces the base's (all features, or only
    [start, stop) with `features=(start, stop)`); `subspaces` may select rows (`gate_rows`)."""

    takes_row_mask = True

    def __init__(self, embed_dim: int | None = None, features: tuple[int, int] | None = None,
                 **kwargs):
        super().__init__(embed_dim=embed_dim, **kwargs)
        self.features = None if features is None else (int(features[0]), int(features[1]))

    def _patch(self, base, source):
        if self.features is None:
            return source.to(base.dtype)
        lo, hi = self.features
        return torch.cat([base[..., :lo], source[..., lo:hi].to(base.dtype), base[..., hi:]], -1)

    def forward(self, base, source, subspaces=None, **kwargs):
        return gate_rows(base, source, subspaces, self._patch)

    def __str__(self):
        return f"PatchIntervention(features={self.features})"


class WriteIntervention(pv.VanillaIntervention):
    """Each example's vector becomes `write(base, value)`: base (n, width), value (n, m) the
    example's source representation (m any width, e.g. k subspace coordinates) -> (n, width).
    `subspaces` may select rows (`gate_rows`). Holds a function, so it is not saved."""

    takes_row_mask = True

    def __init__(self, embed_dim: int | None = None,
                 write: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                 **kwargs):
        super().__init__(embed_dim=embed_dim, **kwargs)
        if write is None:
            raise ValueError("WriteIntervention needs write=fn(base, value) -> new base")
        self.write = write

    def _write(self, base, source):
        # pyvene hands sequence sites as (n, units, width), the state as (n, width)
        flat = self.write(base.reshape(-1, base.shape[-1]), source.reshape(-1, source.shape[-1]))
        return flat.reshape(base.shape).to(base.dtype)

    def forward(self, base, source, subspaces=None, **kwargs):
        return gate_rows(base, source, subspaces, self._write)

    def __str__(self):
        return "WriteIntervention()"


class AblateIntervention(pv.ConstantSourceIntervention, pv.LocalistRepresentationIntervention):
    """Features [start, stop) of every position it sees set to 0 (`values` None) or to
    `values[p, start:stop]` at position p (values: (pos, width), e.g. the mean over a set of
    sequences). base: (batch, pos, width) (the site's whole output). Needs no source."""

    def __init__(self, embed_dim: int | None = None, features: tuple[int, int] = (0, 0),
                 values: torch.Tensor | None = None, **kwargs):
        super().__init__(embed_dim=embed_dim, **kwargs)
        self.features = (int(features[0]), int(features[1]))
        self.values = values

    def forward(self, base, source=None, subspaces=None, **kwargs):
        lo, hi = self.features
        new = base.clone()
        if self.values is None:
            new[..., lo:hi] = 0
        else:
            new[..., lo:hi] = self.values[: base.shape[-2], lo:hi].to(base.device, base.dtype)
        return new

    def __str__(self):
        return f"AblateIntervention(features={self.features}, mean={self.values is not None})"
