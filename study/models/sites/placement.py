"""What the library knows of one pyvene intervenable over our sites, as one value.

A `Placement` says where an intervenable acts on one of our networks (as pyvene's
`RepresentationConfig` says it for one representation), at which token position a pair is
judged, how `study.iia` scores it by default, and the steps of a per-step intervenable's
representations. It is kept beside the intervenable in one weak store, in
`study/models/sites/pyvene_bridge.py` (`where`, `place`, `judge_with`), never set on pyvene's
objects: an intervenable stays a plain `pyvene.IntervenableModel`, and one dropped is
forgotten there too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Placement:
    """- `kind`, `layer`: the site (the step, for one module of a step kind);
    - `n_units`: positions intervened on per example;
    - `per_step`: one representation per time step of a step kind, every example at its own
      step (`site_intervenable`), the representations' steps in pyvene's key order `steps`;
    - `position`: the token position of a pair it is judged at (-1: the pair's answer
      position; the run handle sets a DAS alignment's own, `place`);
    - `batch_size`, `outputs`: how `study.iia` scores it by default: pairs per forward pass,
      and the task (or its `Outputs`) whose output ids decide right and wrong (None: every
      token); the run handle sets the das analysis's (`judge_with`)."""

    kind: str
    layer: int
    n_units: int = 1
    per_step: bool = False
    position: int = -1
    batch_size: int = 1000
    outputs: object = None
    steps: tuple[int, ...] = ()
    # device -> `steps` as a tensor there, made once: the row masks are compared against it
    # at every call; not part of the value (a changed placement makes its own)
    _on: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def steps_on(self, device) -> torch.Tensor:
        """(n_representations,) int64: `steps` on `device`."""
        device = torch.device(device)
        got = self._on.get(device)
        if got is None:
            got = self._on[device] = torch.tensor(self.steps, device=device)
        return got
