"""Geometry of a variable's values inside one run's aligned subspace.

The task's sequences are run once; at every position where the variable is defined
(`task.probe_variables(ids)[variable] >= 0`) the site vector is projected onto the run's k
aligned coordinates, and the projections are laid out on their top two principal components
(PCA of the centred (n_points, k) projections; with k = 1 the second is 0). One point per
value: the mean of its projections, with their standard deviation along each component.
PC1's sign is chosen so that it grows with the value [ours], so layouts of different runs
read the same way round. A reader sees whether the values lie on a line, a curve or a ring.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from study.analyses.compare.paired import SiteRef
from study.analyses.compare.projection import Subspace
from study.models.sites.capture import collect


def site_activations(model, site: SiteRef, ids: np.ndarray, device,
                     batch_size: int = 256) -> np.ndarray:
    """The site's vectors at every position of `ids` (n, pos): (n, T, width)."""
    return collect(model, ids, [(site.kind, site.layer)], device, batch_size)[(site.kind, site.layer)]


def points(acts: np.ndarray, space: Subspace, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(projections (m, k), values (m,)) at every position of `acts` (n, T, width) where
    `values` (n, pos) >= 0."""
    T = min(acts.shape[1], values.shape[1])
    mask = values[:, :T] >= 0
    x = torch.as_tensor(acts[:, :T][mask], device=space.W.device)  # (m, width)
    z = space.read(x).cpu().numpy() if len(x) else np.zeros((0, space.k))  # (m, k)
    return z, values[:, :T][mask]


def layout(z: np.ndarray, values: np.ndarray) -> pd.DataFrame:
    """value, pc1, pc2 (means), sd1, sd2, n: the values on the top two principal components
    of z (m, k)."""
    cols = ["value", "pc1", "pc2", "sd1", "sd2", "n"]
    if len(z) == 0:
        return pd.DataFrame(columns=cols)
    zc = z - z.mean(0)
    _, _, vt = np.linalg.svd(zc, full_matrices=False)
    pcs = zc @ vt[:2].T  # (m, <=2)
    if pcs.shape[1] < 2:
        pcs = np.concatenate([pcs, np.zeros((len(pcs), 2 - pcs.shape[1]))], 1)
    if len(np.unique(values)) > 1 and np.corrcoef(pcs[:, 0], values)[0, 1] < 0:
        pcs[:, 0] = -pcs[:, 0]
    rows = []
    for v in np.unique(values):
        p = pcs[values == v]
        rows.append((int(v), *p.mean(0), *p.std(0), len(p)))
    return pd.DataFrame(rows, columns=cols)
