"""A run's aligned subspace as a pair of maps: read the variable's k coordinates off a site
vector, and write k coordinates back into one.

A DAS alignment (`study/analyses/das/alignment.py`) standardises x -> s = (x - mu) / sigma, maps
with A, interchanges the first k coordinates and maps back. With A(s) = (s + b) W (OAF and
the random control: W = R orthogonal, b = 0; LAF: W and a learned bias b):

    read:   z = ((x - mu) / sigma + b) W[:, :k]                  x (n, d) -> z (n, k)
    write:  x' = ([z, ((x - mu)/sigma + b) W[:, k:]] W⁻¹ − b) sigma + mu
                                                        (x (n, d), z (n, k)) -> x' (n, d)

`write(x, read(x)) == x`, and `write(base, read(source))` is exactly the alignment's own
interchange. `Subspace.from_file(path, key)` reads one saved alignment
(`RUN/analyses/das/alignments*.safetensors`, key `<alignment>/<variable>/<site>/k=<k>`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Subspace:
    """One aligned subspace of a site of width d."""

    W: torch.Tensor  # (d, d) the alignment matrix (R for OAF/random)
    W_inv: torch.Tensor  # (d, d)
    mu: torch.Tensor  # (d,)
    sigma: torch.Tensor  # (d,)
    bias: torch.Tensor  # (d,) zeros except for LAF
    k: int

    @property
    def width(self) -> int:
        return int(self.W.shape[0])

    @classmethod
    def from_matrix(cls, W, k: int, mu=None, sigma=None, bias=None) -> "Subspace":
        """From W (d, d) and the optional mu, sigma, bias (d,): all on W's device (the CPU
        for an array)."""
        W = torch.as_tensor(W, dtype=torch.float32)
        d = W.shape[0]

        def vec(v, fill: float) -> torch.Tensor:  # (d,) beside W
            if v is None:
                return torch.full((d,), fill, dtype=torch.float32, device=W.device)
            return torch.as_tensor(v, dtype=torch.float32, device=W.device)

        return cls(W, torch.linalg.inv(W.double()).float(), vec(mu, 0.0), vec(sigma, 1.0),
                   vec(bias, 0.0), int(k))

    @classmethod
    def from_file(cls, path, key: str) -> "Subspace":
        """The alignment saved under `key` in a das alignments file."""
        from safetensors.torch import load_file

        t = load_file(str(path))
        return cls.from_matrix(t[key], int(t[key + "/k"]), t.get(key + "/mu"),
                               t.get(key + "/sigma"), t.get(key + "/bias"))

    def to(self, device) -> "Subspace":
        return Subspace(*(getattr(self, f).to(device) for f in ("W", "W_inv", "mu", "sigma",
                                                                 "bias")), self.k)

    def _rotated(self, x: torch.Tensor) -> torch.Tensor:  # (n, d) -> (n, d)
        W = self.W.to(x.device)
        return ((x.float() - self.mu.to(x.device)) / self.sigma.to(x.device)
                + self.bias.to(x.device)) @ W

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """x (n, d) -> the k aligned coordinates (n, k)."""
        return self._rotated(x)[:, :self.k]

    def write(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x (n, d) with its k aligned coordinates replaced by z (n, k): (n, d)."""
        dev = x.device
        r = self._rotated(x)
        r = torch.cat([z.to(dev, torch.float32), r[:, self.k:]], dim=1)
        s = r @ self.W_inv.to(dev) - self.bias.to(dev)
        return (s * self.sigma.to(dev) + self.mu.to(dev)).to(x.dtype)
