"""Principal angles between subspaces, and the subspaces DAS alignments define.

`principal_cosines(A, B)`: A (d, k1), B (d, k2) span two subspaces (any bases, not
necessarily orthonormal); returns the cosines of their min(k1, k2) principal angles,
largest first: the singular values of Q_Aᵀ Q_B for orthonormal bases Q (Björck & Golub
1973). Identical subspaces give all ones, orthogonal ones all zeros, and the result does not
depend on the basis chosen inside either subspace.

`alignment_basis(W, mu, sigma, k, space)` turns one saved DAS alignment into a (d, k) basis of
its interchanged subspace. An alignment standardises x -> (x - mu) / sigma, maps with W
(OAF: orthogonal R; LAF: W, plus a bias), swaps the first k coordinates and maps back with
W^-1, so that
- it *reads* the k coordinates (x / sigma) · W[:, j], j < k: `read` basis diag(1/sigma) W[:, :k];
- it *writes* (moves the activation) along the rows j < k of W^-1, scaled back by sigma:
  `write` basis diag(sigma) (W^-1)[:k]ᵀ — the directions the variable is moved along in the
  model's own coordinates [ours: the default];
- `standardised`: W[:, :k] as trained, ignoring each alignment's own sigma.
For an OAF with sigma = 1 the three coincide (W^-1 = Rᵀ).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

SPACES = ("write", "read", "standardised")


def principal_angles(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Principal angles (radians) between span(A) and span(B), smallest first (min(k1, k2) of
    them), from `scipy.linalg.subspace_angles`: accurate for nearly equal subspaces too, where
    the arccos of an SVD's cosines rounds small angles to 0."""
    from scipy.linalg import subspace_angles

    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"subspaces live in different spaces ({A.shape[0]} vs {B.shape[0]} dims)")
    return subspace_angles(A, B)[::-1].copy()


def principal_cosines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Cosines of the principal angles, largest first."""
    return np.clip(np.cos(principal_angles(A, B)), 0.0, 1.0)


def alignment_basis(W: np.ndarray, mu: np.ndarray, sigma: np.ndarray, k: int,
                    space: str = "write") -> np.ndarray:
    W = np.asarray(W, np.float64)
    sigma = np.asarray(sigma, np.float64)
    if space == "standardised":
        return W[:, :k]
    if space == "read":
        return W[:, :k] / sigma[:, None]
    if space == "write":
        inv = np.linalg.inv(W)
        return inv[:k].T * sigma[:, None]
    raise ValueError(f"space {space!r} is not one of {SPACES}")


# --- reading saved alignments ------------------------------------------------------------------

_KEY = re.compile(r"^(?P<alignment>[^/]+)/(?P<variable>.+)/(?P<site>[^/]+)/k=(?P<k>\d+)$")


def read_alignments(path: Path, space: str) -> dict[tuple[str, str, str, int], np.ndarray]:
    """(alignment, variable, site, k) -> (d, k) basis, from a das `alignments.safetensors`
    (keys `<alignment>/<variable>/<site>/k=<k>` holding W, with `/mu`, `/sigma` beside)."""
    from safetensors.numpy import load_file

    t = load_file(str(path))
    out = {}
    for key, mat in t.items():
        m = _KEY.match(key)
        if m is None:
            continue
        k = int(m["k"])
        mu, sigma = t.get(key + "/mu"), t.get(key + "/sigma")
        d = mat.shape[0]
        mu = np.zeros(d) if mu is None else mu
        sigma = np.ones(d) if sigma is None else sigma
        basis = alignment_basis(mat, mu, sigma, k, space)
        out[(m["alignment"], m["variable"], m["site"], k)] = basis
    return out


def alignment_files(run_dir: Path, analysis: str = "das") -> list[tuple[int | None, Path]]:
    """The das alignment files of a run (`analysis`: or another analysis's that saves its
    alignments as das does, the atlas's): (checkpoint, path). The checkpoint comes from the
    file's safetensors metadata `checkpoint`, else a name `alignments-<step>.safetensors`,
    else the analysis's table when it holds exactly one checkpoint; None when unknown."""
    root = Path(run_dir) / "analyses" / analysis
    files = sorted(root.glob("alignments*.safetensors")) if root.is_dir() else []
    single = _single_das_checkpoint(root / f"{analysis}.parquet")
    out = []
    for f in files:
        step = _metadata_checkpoint(f)
        if step is None:
            m = re.search(r"alignments[-_](?:step)?(\d+)\.safetensors$", f.name)
            step = int(m.group(1)) if m else single
        out.append((step, f))
    return out


def _metadata_checkpoint(path: Path) -> int | None:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata() or {}
    value = meta.get("checkpoint")
    return int(value) if value is not None and str(value).lstrip("-").isdigit() else None


def _single_das_checkpoint(table: Path) -> int | None:
    if not table.exists():
        return None
    import pandas as pd

    steps = pd.read_parquet(table, columns=["checkpoint"])["checkpoint"].unique()
    return int(steps[0]) if len(steps) == 1 else None
