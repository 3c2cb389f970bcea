"""Alignment functions of DAS as pyvene interventions: OAF, LAF and the random control.

Every alignment acts on one site vector per example (base (batch, d), source (batch, d)):

    standardise:  x -> (x - mu) / sigma            mu, sigma: buffers fitted on the site's
                                                   activations [paper, Grant et al. 2025]
    map:          z = A(x)
    interchange:  z* = [z_source[:k], z_base[k:]]
    map back:     x* = A^-1(z*) * sigma + mu

- `OrthogonalAlignment` (OAF): pyvene's `RotatedSpaceIntervention` (A(x) = x R with R a full
  orthogonal matrix under torch's orthogonal parametrisation, A^-1(z) = z R^T, the first k
  rotated dims from the source) inside the standardisation. With mu = 0, sigma = 1 it is
  exactly pyvene's class.
- `LinearAlignment` (LAF) [paper; authors' `SymmetricDefiniteMatrix` in grantsrb/mas]:
  A(x) = (x + b) W with W = (M M^T + 0.1 I) diag(s), s_j = tanh(u_j) + 0.1 sign(tanh(u_j))
  (a learned sign per column, its magnitude kept in (0.1, 1.1) so W stays invertible), b a
  learned bias; A^-1(z) = z W^-1 - b with W^-1 = `torch.linalg.inv(W)` [paper].
  `condition_number()` reports cond(W); the DAS loop refuses (reports NaN) above a
  threshold, since the inverse is then not trustworthy in float32.
- `RotatedLinearAlignment` (LAF, form `rotated`) [ours]: A(x) = (x + b) R W with R orthogonal
  (torch's orthogonal parametrisation, as in OAF) and W the authors' matrix above. The
  authors' W alone cannot express OAF: the interchange it defines is the projection
  P_W = W D_k W^-1 (D_k keeps the first k coordinates; diag(s) and b cancel out of it), and
  P_W is an orthogonal projection only when M M^T is block-diagonal, i.e. onto the first k
  standardised axes themselves. So an exact OAF solution (as on the LSTM's [h, c]) can be out
  of its reach. R W covers every invertible matrix (polar decomposition: A = R S, S
  symmetric positive definite), and R with W = I (M = sqrt(0.9) I, s = 1) is the OAF of
  rotation R. A fresh one starts there at its own random R (an OAF's random start, not an
  OAF's fit: the two searches are compared, not nested); `init_from(oaf)` sets R to a given
  OAF's rotation (the LAF then interchanges exactly as that OAF).
- random control: an `OrthogonalAlignment` frozen at a seeded random rotation (`random_oaf`).

Names (`make_alignment`): `oaf`; `laf`, the LAF of `das.laf_form` (`rotated` or `sd`);
`laf_sd`, always a `LinearAlignment` (the authors' arm); `random`.

What the search, the stacked loop and the saved file ask of an alignment, each class answers
for itself (no caller tests which class it holds):
- `common_maps()`: (W, W^-1, b) of the common form z = (x_std + b) W (OAF: R, R^T, 0);
- `maps_cached()`: a context computing W, W^-1 (or R) once for a whole forward, which would
  otherwise be recomputed at every call (the recurrent state is intervened on in one call
  per time step); `cached_maps(intervention)` enters it, for any pyvene intervention;
- `warm_from(warm, acts, k)`: start at k from the fit `warm` of the same kind at a smaller k;
- `condition_number()`: cond(A), 1.0 for a rotation; the search refuses a fit above
  `das.max_cond`;
- `saved_tensors()` / `load_saved(tensors)`: what `alignments.safetensors` keeps of it, and
  back. `load_alignment` picks the class whose saved tensors the file holds (`SAVES`).

The classes live in this importable module so that pyvene and `load_alignment` can rebuild
saved ones.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from study.models.sites.pyvene_interventions import gate_rows, is_row_mask
from study.models.sites.pyvene_loader import pyvene

pv = pyvene()
LAF_EPS = 0.1  # [paper] A = M M^T + 0.1 I; also the authors' floor on the column signs


class _Standardised:
    """Mixin: the mu/sigma buffers and their fitting."""

    def _init_standardisation(self, n: int) -> None:
        # built on the CPU, like every alignment (seeded draws then agree on every device);
        # `.to(device)` moves it beside the site it acts on
        self.register_buffer("mu", torch.zeros(n, device="cpu"))
        self.register_buffer("sigma", torch.ones(n, device="cpu"))

    @torch.no_grad()
    def fit_standardisation(self, acts: torch.Tensor) -> None:
        """Set mu, sigma from activations (n, d); dims that never vary keep sigma = 1."""
        acts = acts.float()
        self.mu.copy_(acts.mean(0))
        sd = acts.std(0) if len(acts) > 1 else torch.ones_like(self.sigma)
        self.sigma.copy_(torch.where(sd > 1e-6, sd, torch.ones_like(sd)))

    def _std(self, x):
        return (x - self.mu) / self.sigma

    def _unstd(self, x):
        return x * self.sigma + self.mu

    @property
    def k(self) -> int:
        return int(self.interchange_dim)

    @torch.no_grad()
    def warm_from(self, warm, acts: torch.Tensor, k: int) -> None:
        """Start at k from `warm`, the chosen fit of the same kind at a smaller k: its
        parameters whole (its first k dims contain the smaller subspace), interchanging k."""
        self.load_state_dict(warm.state_dict())
        self.set_interchange_dim(k)

    # suffixes of the tensors `saved_tensors` adds to the common ones ("", /mu, /sigma, /k)
    SAVES: tuple[str, ...] = ()

    def _saved(self) -> dict[str, torch.Tensor]:
        return {"": self.matrix().detach(), "/mu": self.mu, "/sigma": self.sigma,
                "/k": torch.tensor(self.k, device="cpu")}  # saved: host-side

    def saved_tensors(self) -> dict[str, torch.Tensor]:
        """What `alignments.safetensors` keeps of this alignment, by key suffix: the matrix
        ("": R or W), the standardisation, k and the parameters it is rebuilt from
        (`SAVES`), on the host."""
        return {k: v.detach().cpu().contiguous() for k, v in self._saved().items()}

    @torch.no_grad()
    def load_saved(self, t: dict[str, torch.Tensor]) -> None:
        """Set the parameters from `saved_tensors()`' dict (by suffix); k is the built one."""
        self.mu.copy_(t["/mu"])
        self.sigma.copy_(t["/sigma"])


class OrthogonalAlignment(_Standardised, pv.RotatedSpaceIntervention):
    """OAF: pyvene's rotated-space interchange of the first k dims, in standardised space.
    `subspaces`: None (every row), a (batch,) bool row selection
    (`study/models/sites/pyvene_interventions.py`), or pyvene's per-example lists of rotated dims."""

    takes_row_mask = True

    def __init__(self, embed_dim: int, k: int | None = None, **kwargs):
        super().__init__(embed_dim=embed_dim, **kwargs)
        self._init_standardisation(embed_dim)
        if k is not None:
            self.set_interchange_dim(k)

    def set_interchange_dim(self, k):
        # a buffer (pyvene's): kept beside the others, whichever device the alignment is on
        self.interchange_dim = torch.as_tensor(int(k), device=self.mu.device)

    def forward(self, base, source, subspaces=None, **kwargs):
        if subspaces is None or is_row_mask(subspaces):
            return gate_rows(base, source, subspaces, self._interchange)
        out = super().forward(self._std(base), self._std(source), subspaces, **kwargs)
        return self._unstd(out).to(base.dtype)

    def _interchange(self, base, source):
        out = super().forward(self._std(base), self._std(source), None)
        return self._unstd(out).to(base.dtype)

    def matrix(self) -> torch.Tensor:
        """R (d, d): rotated = x R; its first k columns span the aligned subspace."""
        return self.rotate_layer.weight

    def condition_number(self) -> float:
        """cond(R) = 1: a rotation's inverse is exact."""
        return 1.0

    def common_maps(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W, W^-1, b) of the common form (`study/analyses/das/stacked.py`): R, R^T, 0."""
        w = self.rotate_layer.weight
        return w, w.T, torch.zeros(w.shape[0], dtype=w.dtype, device=w.device)

    def maps_cached(self):
        """R computed once for every call inside the block (torch's parametrisation cache)."""
        return parametrize.cached()

    @torch.no_grad()
    def warm_from(self, warm, acts: torch.Tensor, k: int) -> None:
        """A larger k than `warm`'s grows it (`extend_from`): its aligned dims first, then
        the directions the site's activations `acts` (n, d) vary least in; the same k takes
        it whole."""
        if self.k > warm.k:
            self.extend_from(warm, acts)
        else:
            super().warm_from(warm, acts, k)

    @torch.no_grad()
    def load_saved(self, t: dict[str, torch.Tensor]) -> None:
        super().load_saved(t)
        self.rotate_layer.weight = t[""]  # through the parametrisation's right inverse

    @torch.no_grad()
    def extend_from(self, prev: "OrthogonalAlignment", acts: torch.Tensor) -> None:
        """Start from `prev` (a smaller k) [ours]: its k_prev aligned dims first, then the
        directions outside them in which the standardised activations `acts` (n, d) vary
        least, least first. Swapping a direction the site hardly uses changes little, so the
        search at this k starts near the IIA `prev` reached instead of below it."""
        d, kp = self.rotate_layer.weight.shape[0], prev.k
        keep = prev.matrix().detach()[:, :kp]  # (d, kp) orthonormal
        eye = torch.eye(d, dtype=keep.dtype, device=keep.device)  # (d, d)
        basis, _ = torch.linalg.qr(torch.cat([keep, eye], 1))  # (d, d + kp)
        rest = basis[:, kp:d]  # (d, d - kp): an orthonormal basis of keep's complement
        x = prev._std(acts.float().to(keep.device))
        x = (x - x.mean(0)) @ rest  # (n, d - kp)
        _, vecs = torch.linalg.eigh(x.T @ x / max(len(x), 1))  # ascending variance
        self.rotate_layer.weight = torch.cat([keep, rest @ vecs], 1)
        self.mu.copy_(prev.mu)
        self.sigma.copy_(prev.sigma)


def random_oaf(embed_dim: int, k: int, seed: int) -> OrthogonalAlignment:
    """The random control: a fixed (untrained) seeded random rotation."""
    g = torch.Generator().manual_seed(seed)  # drawn on the CPU; the caller moves the alignment
    q, r = torch.linalg.qr(torch.randn(embed_dim, embed_dim, generator=g, device="cpu"))
    q = q * torch.sign(torch.diagonal(r))  # Haar-distributed
    inst = OrthogonalAlignment(embed_dim, k)
    with torch.no_grad():
        inst.rotate_layer.weight = q  # through the parametrisation's right inverse
    for p in inst.parameters():
        p.requires_grad_(False)
    return inst


class LinearAlignment(_Standardised, pv.TrainableIntervention,
                      pv.DistributedRepresentationIntervention):
    """LAF: A = (M M^T + 0.1 I) with learned column signs and a bias; A^-1 by linalg.inv.
    `subspaces`: None (every row) or a (batch,) bool row selection."""

    takes_row_mask = True

    def __init__(self, embed_dim: int, k: int | None = None, **kwargs):
        super().__init__(embed_dim=embed_dim, **kwargs)
        n = embed_dim
        cpu = torch.device("cpu")  # built on the CPU (see `_init_standardisation`)
        self.core = nn.Parameter(torch.randn(n, n, device=cpu) / math.sqrt(n))  # M [authors']
        self.signs = nn.Parameter(0.01 * torch.randn(n, device=cpu))  # u [authors' init]
        self.bias = nn.Parameter(torch.zeros(n, device=cpu))  # b
        self._init_standardisation(n)
        self._cache = None
        if k is not None:
            self.set_interchange_dim(k)

    def set_interchange_dim(self, k):
        self.interchange_dim = torch.as_tensor(int(k), device=self.mu.device)

    def matrix(self) -> torch.Tensor:
        """W (d, d) = (M M^T + 0.1 I) diag(s)."""
        n = self.core.shape[0]
        psd = self.core @ self.core.T + LAF_EPS * torch.eye(n, device=self.core.device,
                                                             dtype=self.core.dtype)
        t = torch.tanh(self.signs)
        return psd * (t + LAF_EPS * torch.sign(t))  # scales column j by s_j

    def maps(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cache is not None:
            return self._cache
        w = self.matrix()
        return w, torch.linalg.inv(w)

    def condition_number(self) -> float:
        with torch.no_grad():
            return float(torch.linalg.cond(self.matrix().double()))

    def common_maps(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W, W^-1, b) of the common form (`study/analyses/das/stacked.py`)."""
        w, w_inv = self.maps()
        return w, w_inv, self.bias

    @contextlib.contextmanager
    def maps_cached(self):
        """W and W^-1 computed once for every call inside the block (autograd kept)."""
        self._cache = None
        self._cache = self.maps()
        try:
            yield
        finally:
            self._cache = None

    SAVES = ("/core", "/signs", "/bias")

    def _saved(self) -> dict[str, torch.Tensor]:
        return {**super()._saved(), "/core": self.core.detach(), "/signs": self.signs.detach(),
                "/bias": self.bias.detach()}

    @torch.no_grad()
    def load_saved(self, t: dict[str, torch.Tensor]) -> None:
        super().load_saved(t)
        self.core.copy_(t["/core"])
        self.signs.copy_(t["/signs"])
        self.bias.copy_(t["/bias"])

    def forward(self, base, source, subspaces=None, **kwargs):
        if subspaces is not None and not is_row_mask(subspaces):
            raise ValueError("LinearAlignment interchanges the first k dims; subspaces may "
                             "only select rows (a (batch,) bool tensor)")
        return gate_rows(base, source, subspaces, self._interchange)

    def _interchange(self, base, source):
        w, w_inv = self.maps()
        k = self.k
        zb = (self._std(base.to(w.dtype)) + self.bias) @ w
        zs = (self._std(source.to(w.dtype)) + self.bias) @ w
        z = torch.cat([zs[..., :k], zb[..., k:]], dim=-1)
        return self._unstd(z @ w_inv - self.bias).to(base.dtype)

    def __str__(self):
        return "LinearAlignment()"


class RotatedLinearAlignment(LinearAlignment):
    """LAF of form `rotated` [ours]: A = R (M M^T + 0.1 I) diag(s), R orthogonal (see the
    module docstring: it contains every OAF, which the authors' form does not). Built at a
    random rotation R (pyvene's `RotateLayer` draw, seeded by `make_alignment`) with W = I."""

    def __init__(self, embed_dim: int, k: int | None = None, **kwargs):
        super().__init__(embed_dim, k, **kwargs)
        layer = pv.models.layers.RotateLayer(embed_dim)
        self.rotate_layer = torch.nn.utils.parametrizations.orthogonal(layer)
        self._identity_w()

    @torch.no_grad()
    def _identity_w(self) -> None:
        """W = M M^T + 0.1 I scaled by s = 1: M = sqrt(0.9) I, tanh(u) = 0.9; b = 0."""
        n = self.core.shape[0]
        self.core.copy_(math.sqrt(1 - LAF_EPS) * torch.eye(n, dtype=self.core.dtype,
                                                           device=self.core.device))
        self.signs.fill_(math.atanh(1 - LAF_EPS))
        self.bias.zero_()

    def matrix(self) -> torch.Tensor:
        """A (d, d) = R W: rotate first, then the authors' symmetric definite map."""
        return self.rotate_layer.weight @ super().matrix()

    @torch.no_grad()
    def init_from(self, oaf: OrthogonalAlignment) -> None:
        """Act as `oaf`: R = its rotation, W = I, b = 0, same standardisation."""
        self.rotate_layer.weight = oaf.rotate_layer.weight.detach().clone()
        self._identity_w()
        self.mu.copy_(oaf.mu)
        self.sigma.copy_(oaf.sigma)

    SAVES = LinearAlignment.SAVES + ("/rotation",)

    def _saved(self) -> dict[str, torch.Tensor]:
        return {**super()._saved(), "/rotation": self.rotate_layer.weight.detach()}

    @torch.no_grad()
    def load_saved(self, t: dict[str, torch.Tensor]) -> None:
        super().load_saved(t)
        self.rotate_layer.weight = t["/rotation"]

    def __str__(self):
        return "RotatedLinearAlignment()"


def cached_maps(inst):
    """The intervention's matrices computed once for every call inside the block (autograd
    kept): an alignment's own `maps_cached()` (a stacked batch's too); any other pyvene
    intervention (a patch, a loaded rotation of pyvene's) under torch's parametrisation
    cache."""
    own = getattr(inst, "maps_cached", None)
    return own() if own is not None else parametrize.cached()


LAF_CLASSES = {"sd": LinearAlignment, "rotated": RotatedLinearAlignment}


def make_alignment(name: str, embed_dim: int, k: int, seed: int, laf_form: str = "sd"):
    """A fresh alignment of the registered kind `name` (seeded,
    `study/analyses/das/alignments/`); `laf_form` picks the class of `laf`."""
    from study.analyses.das.alignments import get
    return get(name).make(embed_dim, k, seed, laf_form)


# the classes a saved alignment may be rebuilt as (`load_alignment`)
SAVED_CLASSES = (OrthogonalAlignment, LinearAlignment, RotatedLinearAlignment)


def saved_class(suffixes) -> type:
    """The class of an alignment saved with tensors under these key `suffixes`: the one
    whose `SAVES` it holds, the most specific where several do (a rotated LAF holds an
    `sd` one's too)."""
    have = set(suffixes)
    fits = [c for c in SAVED_CLASSES if set(c.SAVES) <= have]
    return max(fits, key=lambda c: len(c.SAVES))


def save_alignments(tensors: dict, out_dir, checkpoint: int):
    """Write `out_dir/alignments.safetensors` (atomically; metadata "checkpoint").

    The file holds the latest analysed checkpoint; one of another checkpoint already there
    is kept as `alignments-<step>.safetensors`, so `checkpoint=STEP` runs build a history
    (read by the `subspaces` analysis).
    """
    import os
    from pathlib import Path

    from safetensors import safe_open
    from safetensors.torch import save_file

    from study.core.atomic import atomic_path

    out_dir = Path(out_dir)
    path = out_dir / "alignments.safetensors"
    if path.exists():
        with safe_open(str(path), framework="pt") as f:
            old = (f.metadata() or {}).get("checkpoint")
        if old is not None and old.isdigit() and int(old) != checkpoint:
            os.replace(path, out_dir / f"alignments-{int(old)}.safetensors")
    (out_dir / f"alignments-{checkpoint}.safetensors").unlink(missing_ok=True)
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"checkpoint": str(checkpoint)})


def load_alignment(path, key: str):
    """Rebuild the alignment saved under `key` (e.g. "oaf/up_down:count/state@pair/k=4")."""
    from safetensors.torch import load_file

    t = load_file(str(path))
    mine = {name[len(key):]: v for name, v in t.items()
            if name == key or (name.startswith(key + "/") and "/" not in name[len(key) + 1:])}
    cls = saved_class(mine)
    torch.manual_seed(0)  # built as a fresh alignment of seed 0 is, then overwritten
    inst = cls(mine[""].shape[0], int(mine["/k"]))
    inst.load_saved(mine)
    return inst
