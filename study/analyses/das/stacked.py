"""Several alignments of one k as one pyvene intervention: the members of a batch of the DAS
loop trained together (`study/analyses/das/loop.py`), restarts and alignment kinds alike.

The batch holds one chunk of rows per member, in order: rows [j * b, (j + 1) * b) are
intervened on by member `active[j]` (b = rows / len(active)). Each member's maps (W, W^-1,
bias, mu, sigma) are stacked, so the whole batch is interchanged by a few batched matrix
products, whatever the number of members [ours: one forward of the network for every
member instead of one each].

Every member computes what it computes alone (`study/analyses/das/alignment.py`), in the common
form

    z = (x_std + b) W,   z* = [z_source[:k], z_base[k:]],   x* = unstd(z* W^-1 - b)

- OAF: W = R, W^-1 = R^T, b = 0 (pyvene's rotated-space interchange);
- LAF (either form): W = `matrix()`, W^-1 its inverse, b the learned bias.

`subspaces` follows the convention of the alignments (`study/models/sites/pyvene_interventions.py`):
None (every row) or a (batch,) bool row selection, the other rows returned as they are.
`gate_rows` hands its function the selected rows without their indices, and here a row's
index says which member acts on it, so the selection is made here: few selected rows (the
state kind, where each step holds the pairs at that step) go chunk by chunk through
`gate_rows` with that chunk's member's maps; most rows go at once, chunk j by member j, and
the unselected ones are put back (`torch.where`) [ours: at most twice the work].
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.utils import parametrize

from study.models.sites.pyvene_interventions import gate_rows, is_row_mask
from study.models.sites.pyvene_loader import pyvene

pv = pyvene()


class StackedAlignment(pv.TrainableIntervention, pv.DistributedRepresentationIntervention):
    """Members (alignments of one width and k, each with its `common_maps()`: W (d, d),
    W^-1 (d, d), b (d,) in the common form above) acting each on its own chunk of rows."""

    takes_row_mask = True

    def __init__(self, members):
        members = list(members)
        for m in members:
            if not callable(getattr(m, "common_maps", None)):
                raise TypeError(f"cannot stack a {type(m).__name__}: it has no common_maps()")
        d = int(members[0].embed_dim)
        super().__init__(embed_dim=d)
        if len({int(m.k) for m in members}) != 1:
            raise ValueError("stacked alignments must share k")
        self.members = nn.ModuleList(members)
        self.set_interchange_dim(members[0].k)
        self.active = list(range(len(members)))  # members present in the batch, chunk order
        self._cache = None

    def set_interchange_dim(self, k):
        self.interchange_dim = torch.as_tensor(int(k), device=self.embed_dim.device)
        self._k = int(k)  # read at every call: kept on the host (no device sync)

    @property
    def k(self) -> int:
        return self._k

    def stacked_maps(self):
        """The active members' maps, stacked: W, W^-1 (m, d, d), b, mu, sigma (m, d). Only
        those members enter the graph, so the others get no gradient (not even a zero)."""
        if self._cache is not None:
            return self._cache
        maps = [self.members[j].common_maps() for j in self.active]
        w, w_inv, b = (torch.stack(t) for t in zip(*maps))
        mu = torch.stack([self.members[j].mu for j in self.active])  # (m, d)
        sigma = torch.stack([self.members[j].sigma for j in self.active])  # (m, d)
        return w, w_inv, b, mu, sigma

    @contextlib.contextmanager
    def cached(self):
        """The stacked maps computed once for every call inside the block (autograd kept);
        the state kind calls the intervention once per time step."""
        self._cache = None
        self._cache = self.stacked_maps()
        try:
            yield
        finally:
            self._cache = None

    @contextlib.contextmanager
    def maps_cached(self):
        """`cached()`, with the members' rotations cached by torch's parametrisations while
        the stacked maps are computed (`study.analyses.das.alignment.cached_maps`)."""
        with parametrize.cached(), self.cached():
            yield

    def forward(self, base, source, subspaces=None, **kwargs):
        if subspaces is not None and (not is_row_mask(subspaces)
                                      or subspaces.shape != base.shape[:1]):
            raise ValueError("subspaces: give a (batch,) bool tensor of the rows to intervene on")
        w, w_inv, b, mu, sigma = self.stacked_maps()
        m = w.shape[0]
        if base.shape[0] % m:
            raise ValueError(f"a batch of {base.shape[0]} rows does not split into {m} chunks")
        if subspaces is None:
            return self._chunks(base, source, w, w_inv, b, mu, sigma)
        rows = subspaces.to(base.device).nonzero().squeeze(1)  # (n,) one host sync, as gate_rows
        if len(rows) == 0:
            return base
        if 2 * len(rows) > len(base):  # most rows: interchange all, keep the selected ones
            out = self._chunks(base, source, w, w_inv, b, mu, sigma)
            keep = subspaces.to(base.device).reshape(-1, *([1] * (base.dim() - 1)))
            return torch.where(keep, out, base)
        # few rows (the state kind: the pairs at this step): chunk by chunk, only the
        # selected rows, with that chunk's member's maps (the work of the members alone)
        c = base.shape[0] // m
        sel = subspaces.to(base.device)
        return torch.cat([gate_rows(
            base[i * c:(i + 1) * c], source[i * c:(i + 1) * c], sel[i * c:(i + 1) * c],
            lambda xb, xs, i=i: self._rows(xb, xs, w[i], w_inv[i], b[i], mu[i], sigma[i]))
            for i in range(m)])

    def _chunks(self, base, source, w, w_inv, b, mu, sigma):
        """Every row, chunk j by member j: maps (m, d, d) and (m, d), rows (m * c, ..., d)."""
        m, d = w.shape[0], base.shape[-1]
        xb = base.reshape(m, -1, d)  # (m, rows per chunk, d)
        xs = source.reshape(m, -1, d)
        out = self._interchange(xb, xs, w, w_inv, b[:, None], mu[:, None], sigma[:, None])
        return out.reshape(base.shape).to(base.dtype)

    def _rows(self, base, source, w, w_inv, b, mu, sigma):
        """Rows of one member: w, w_inv (d, d), b, mu, sigma (d,), rows (n, ..., d)."""
        out = self._interchange(base, source, w, w_inv, b, mu, sigma)
        return out.to(base.dtype)

    def _interchange(self, xb, xs, w, w_inv, b, mu, sigma):
        """z = (x_std + b) W, the first k dims from the source, back; batched over a leading
        dim or not. xb, xs (g, r, d); w, w_inv (g, d, d); b, mu, sigma (g, 1, d)."""
        k = self.k
        zb = ((xb.to(w.dtype) - mu) / sigma + b) @ w  # (g, r, d)
        zs = ((xs.to(w.dtype) - mu) / sigma + b) @ w
        z = torch.cat([zs[..., :k], zb[..., k:]], dim=-1)
        return (z @ w_inv - b) * sigma + mu

    def __str__(self):
        return f"StackedAlignment({len(self.members)})"
