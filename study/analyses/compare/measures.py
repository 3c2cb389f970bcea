"""Basis-free similarity of two sets of activations of the same inputs.

X (n, k1) and Y (n, k2) hold two networks' activations (here: each network's projection onto
its own aligned subspace) for the same n inputs, row i of both for input i. Their columns
are unrelated (different networks, different bases), so the measures compare the geometry of
the n points, not coordinates:

- `linear_cka`: linear centred kernel alignment (Kornblith et al. 2019, "Similarity of
  Neural Network Representations Revisited", ICML), ||Yᵀ X||²_F / (||Xᵀ X||_F ||Yᵀ Y||_F)
  on column-centred X, Y. 1 when Y is an orthogonal transform and isotropic scaling of X
  (plus a shift); invariant to both; near 0 for unrelated inputs when n >> k.
- `procrustes_similarity`: orthogonal Procrustes on centred, unit-Frobenius-norm X, Y:
  max over orthogonal Q of tr(Qᵀ Yᵀ X) = the nuclear norm of Yᵀ X, in [0, 1]
  (1 − d²/2 for the Procrustes distance d). Widths may differ (a semi-orthogonal Q).
- `shuffled_baseline`: the same measure with the rows of Y permuted (inputs shuffled
  between the two networks): what two unrelated point clouds of these shapes give.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def _centred(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected (n, k) activations, got shape {x.shape}")
    return x - x.mean(0, keepdims=True)


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of X (n, k1) and Y (n, k2) [Kornblith et al. 2019]; NaN if either is
    constant."""
    x, y = _centred(x), _centred(y)
    if len(x) != len(y):
        raise ValueError(f"row counts differ: {len(x)} vs {len(y)} (rows must be the same inputs)")
    cross = np.linalg.norm(y.T @ x) ** 2
    norm = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    return float(cross / norm) if norm > 1e-12 else float("nan")


def procrustes_similarity(x: np.ndarray, y: np.ndarray) -> float:
    """Orthogonal Procrustes similarity of X (n, k1) and Y (n, k2): the nuclear norm of
    Yᵀ X after centring and scaling both to unit Frobenius norm; NaN if either is constant."""
    x, y = _centred(x), _centred(y)
    if len(x) != len(y):
        raise ValueError(f"row counts differ: {len(x)} vs {len(y)} (rows must be the same inputs)")
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    if nx < 1e-12 or ny < 1e-12:
        return float("nan")
    return float(np.linalg.svd((y / ny).T @ (x / nx), compute_uv=False).sum())


MEASURES: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "cka": linear_cka,
    "procrustes": procrustes_similarity,
}


def shuffled_baseline(measure: Callable, x: np.ndarray, y: np.ndarray, n_perm: int = 5,
                      seed: int = 0) -> float:
    """Mean of `measure(X, Y[perm])` over `n_perm` seeded permutations of Y's rows [ours]."""
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    vals = [measure(x, y[rng.permutation(len(y))]) for _ in range(n_perm)]
    vals = [v for v in vals if not np.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")
