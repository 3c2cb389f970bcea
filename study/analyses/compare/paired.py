"""The position correspondence between runs: the task's counterfactual pairs.

Two runs of one task are read on the same inputs at the same token positions: the variable's
counterfactual pairs (`task.counterfactuals(variable, n, split, seed)`), each run at the
pair's base position of the base sequence and its source position of the source sequence —
the very places DAS aligned the variable at (aligned pairs: the answer position,
`study.analyses.common.interchange.pair_tensors`). Every site is indexed by token (the state after
token t, the residual stream at token t), so "after token t of this sequence" is the same
event in a recurrent network and a transformer [ours].

At `compare.site=atlas` each run is read at its own atlas cell's token role instead
(`RolePairs`): the pairs kept are those whose base and source hold every role read (both
runs' roles), each run read at its role's position in the source and written at it in the
base, the counterfactual label staying the pair's — as the atlas scores its cells
(`study.analyses.atlas.grid.at_role`). Where a variable is a property of the whole sequence
(binding's, whose label is the program's answer) every role that holds it names the same
value; where the pairs carry their own positions and the value changes along the sequence
(counting's count), a role other than the pair's own moves the intervention away from the
positions its label was computed for.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
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


class RolePairs:
    """A variable's pairs per split (`pairs`: "fit" | "test" | "val" -> `Pairs`), kept to
    those whose base and source hold given token roles (`task.roles`), with each role's
    positions there; cached. No roles: every pair, at its own positions."""

    def __init__(self, pairs: dict, task):
        self.pairs, self.task, self._kept = pairs, task, {}

    def get(self, which: str, roles: tuple[str, ...] = ()):
        """(pairs kept (a `Pairs`), {role: (base positions (n,), source positions (n,))})."""
        from study.analyses.atlas.build import by_role
        from study.analyses.atlas.grid import take_pairs
        from study.core.errors import UsageError
        roles = tuple(sorted(set(roles)))
        if roles and by_role(self.task):
            raise UsageError(f"compare.site=atlas: {self.task.name}'s pairs are labelled for the "
                             f"step they intervene at, so one pair set cannot read two runs at "
                             f"their own roles; compare these runs with compare.site=best")
        if (which, roles) not in self._kept:
            pairs = self.pairs[which]
            if not roles:
                self._kept[(which, roles)] = pairs, {}
            else:
                base, source = (self.task.roles(ids) for ids in (pairs.base_ids,
                                                                  pairs.source_ids))
                keep = np.ones(len(pairs.base_ids), bool)
                for role in roles:
                    keep &= (base[role] >= 0) & (source[role] >= 0)
                self._kept[(which, roles)] = take_pairs(pairs, keep), {
                    role: (base[role][keep], source[role][keep]) for role in roles}
        return self._kept[(which, roles)]


@torch.no_grad()
def paired_vectors(model, pairs, site: SiteRef, device, batch_size: int = 512,
                   outputs=None, positions=None) -> PairedVectors:
    """A run's vectors at `site` on the pairs (a `study.tasks.base.Pairs`), the pairs judged by
    the run's network (`judged`: which of them test an interchange in it); `outputs`: the
    task, whose output ids score interchanges on these pairs (`pair_tensors`). `positions`:
    (base (n,), source (n,)) positions to read and write at instead of the pairs' own (a
    token role's, `RolePairs`); the judging does not depend on them."""
    check_site(model, site.kind, site.layer)
    pt = judged(model, pair_tensors(pairs, device, site.position, outputs), batch_size)
    if positions is not None:
        t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long, device=device)  # noqa: E731
        pt = replace(pt, base_pos=t(positions[0]), source_pos=t(positions[1]))
    base = gather_site(model, pt.base_ids, site.kind, site.layer, pt.base_pos, batch_size)
    source = gather_site(model, pt.source_ids, site.kind, site.layer, pt.source_pos, batch_size)
    return PairedVectors(pt, base.float(), source.float())
