"""The position correspondence between runs: the task's counterfactual pairs.

Two runs of one task are read on the same inputs at the same token positions: the variable's
counterfactual pairs (`task.counterfactuals(variable, n, split, seed)`), each run at the
pair's base position of the base sequence and its source position of the source sequence —
the very places DAS aligned the variable at (aligned pairs: the answer position,
`study.analyses.common.interchange.pair_tensors`). Every site is indexed by token (the state after
token t, the residual stream at token t), so "after token t of this sequence" is the same
event in a recurrent network and a transformer [ours].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from study.analyses.common.interchange import PairTensors, judged, pair_tensors
from study.core.sites import check_site, parse_site_key
from study.models.sites.capture import gather_site


@dataclass(frozen=True)
class SiteRef:
    """Where a run's alignment lives: kind, layer, and the pairs' position (-1: the pair's)."""

    kind: str
    layer: int
    position: int = -1

    @classmethod
    def parse(cls, label: str) -> "SiteRef":
        """From a das key fragment: "state@pair", "resid[1]@pair", "resid[3]@17"
        (`study.core.sites.site_key`)."""
        return cls(*parse_site_key(label))


@dataclass
class PairedVectors:
    """One run's site vectors on one set of pairs."""

    pairs: PairTensors  # judged by the run's network: `pairs.tested` are the pairs it tests
    base: torch.Tensor  # (n, width) at each base sequence's base position
    source: torch.Tensor  # (n, width) at each source sequence's source position

    @property
    def both(self) -> torch.Tensor:
        """(2n, width): base rows then source rows (the inputs compared across runs)."""
        return torch.cat([self.base, self.source])


@torch.no_grad()
def paired_vectors(model, pairs, site: SiteRef, device, batch_size: int = 512,
                   outputs=None) -> PairedVectors:
    """A run's vectors at `site` on the pairs (a `study.tasks.base.Pairs`), the pairs judged by
    the run's network (`judged`: which of them test an interchange in it); `outputs`: the
    task, whose output ids score interchanges on these pairs (`pair_tensors`)."""
    check_site(model, site.kind, site.layer)
    pt = judged(model, pair_tensors(pairs, device, site.position, outputs), batch_size)
    base = gather_site(model, pt.base_ids, site.kind, site.layer, pt.base_pos, batch_size)
    source = gather_site(model, pt.source_ids, site.kind, site.layer, pt.source_pos, batch_size)
    return PairedVectors(pt, base.float(), source.float())
