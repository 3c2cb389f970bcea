"""Cross-model interchange ("stitching"): carry a variable's value from run A into run B
through a linear map between their aligned subspaces.

1. Fit M ((k_A + 1), k_B) by least squares on paired inputs: z_B ≈ [z_A, 1] M, with
   z = each run's k aligned coordinates (`projection.Subspace.read`) at the same inputs and
   positions (`paired`: base and source rows of the fitting pairs) [ours].
2. For each test pair: read z_A at the source input in A, map it, write it into B's subspace
   at the base input (B's other coordinates kept, `Subspace.write`) and run B on.
3. IIA = the fraction of B's *tested* pairs whose every scored output equals the
   counterfactual labels (the argmax among the task's output ids, as training scores:
   `study/core/outputs.py`). A pair is tested when B itself, run on the base without
   intervention, outputs the base label and not the counterfactual one
   (`study.analyses.common.interchange.judged`, as DAS and patching score): a pair whose
   base output is already the counterfactual label, or is wrong, would reward a write that
   does nothing [ours]. `n_tested` is their number, `n_changed` the causal model's changed
   pairs (`study.tasks.base.Pairs.changed`).

The write runs through pyvene like every intervention of the library
(`study.models.sites.pyvene_bridge.site_intervenable` holding a `WriteIntervention`, the
mapped coordinates handed in as each pair's source representation).

Controls [ours]:
- `shuffled_map_iia`: the map fitted with A's rows permuted against B's. Permuted rows carry
  no information about one another, so its least-squares slope is small (sampling noise) and
  it writes near B's *mean* coordinates. It is not a null: a readout that takes an argmax
  reads the *direction* of a write from the mean, so the small random slope still carries a
  randomly transformed copy of A's value, and the score depends on how B's readout breaks
  near-ties (anywhere from 0 to near B's own IIA). It is kept as a check that stitching
  needs the fitted correspondence, and is neither a chance level nor evidence of a shared
  value; `chance_iia` is the chance level.
- `chance_iia`: B's own subspace written with B's own source coordinates of *other* pairs
  (sources permuted across pairs): a proper code of some value of the variable, unrelated to
  this pair's source. Its IIA is the chance that a valid but uninformed write gives the
  counterfactual answer (with five equally likely letters, about one in four or five).
- `random_subspace_iia`: both runs' random-rotation subspaces (their random DAS controls), the
  map fitted the same way.
- `input_code_iia`, `output_code_iia`, `position_code_iia`: network-free codes of the input
  window, of the answer and of the read position written into B through the same kind of
  map (`codes`, `study.claims.rules`).
- `decode_iia`: decode-then-write (`decode`): A's value decoded by a classifier, B's class
  mean of it written; the affine map's capacity raised to the codes'.
`own_iia` is B's own interchange (B's source vector read and written by B's alignment) on the
same tested pairs: stitching can at best recover it.
"""
from __future__ import annotations

import numpy as np
import torch

from study.analyses.common.interchange import PairTensors, rows_right, scored_end
from study.analyses.compare.paired import SiteRef
from study.analyses.compare.projection import Subspace
from study.core.labels import IGNORE
from study.models.sites.pyvene_bridge import site_intervenable
from study.models.sites.pyvene_run import interchange_vectors


def fit_map(za: torch.Tensor, zb: torch.Tensor, one_hot: bool = False) -> torch.Tensor:
    """Least squares M ((k_a + 1), k_b) with zb ≈ [za, 1] M; za (n, k_a), zb (n, k_b).
    `one_hot`: za is a one-hot code, whose blocks each sum to the intercept, so [za, 1] is
    rank-deficient by construction: the minimum-norm solution through the SVD with a cutoff
    well above rounding (1e-8 of the largest singular value), which rounding in another
    process cannot move (QR with pivoting there gives maps that differ between processes)."""
    X = torch.cat([za.double(), torch.ones(len(za), 1, dtype=torch.float64, device=za.device)], 1)
    if one_hot:
        return torch.linalg.lstsq(X.cpu(), zb.double().cpu(), rcond=1e-8,
                                  driver="gelsd").solution.float()
    return torch.linalg.lstsq(X.cpu(), zb.double().cpu(), rcond=None).solution.float()


def apply_map(M: torch.Tensor, za: torch.Tensor) -> torch.Tensor:
    """[za, 1] M: (n, k_a) -> (n, k_b)."""
    M = M.to(za.device)
    return za.float() @ M[:-1] + M[-1]


@torch.no_grad()
def interchange_right(model, site: SiteRef, space: Subspace, pt: PairTensors,
                      z: torch.Tensor, batch_size: int = 500) -> np.ndarray:
    """(n,) bool: with each base's aligned coordinates at its base position replaced by z
    (n, k), every scored output equals the counterfactual label."""
    from study.models.sites.pyvene_interventions import WriteIntervention

    iv = site_intervenable(model, site.kind, site.layer, WriteIntervention(write=space.write))
    out = []
    for lo in range(0, len(pt), batch_size):
        sub = pt.take(slice(lo, lo + batch_size))
        T = scored_end(sub.cf_labels, sub.base_pos)
        scored = sub.cf_labels[:, :T] != IGNORE  # (b, T): the output layer runs only there
        logits = interchange_vectors(iv, sub.base_ids[:, :T], sub.base_pos,
                                     z[lo:lo + batch_size], readout=scored)  # (m, vocab)
        rows = scored.nonzero()[:, 0]
        out.append(rows_right(logits, sub.cf_labels[:, :T][scored], rows, len(sub),
                              sub.outputs).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, bool)


def stitched_iia(model_b, site_b: SiteRef, space_b: Subspace, M: torch.Tensor,
                 za_source: torch.Tensor, pt_b: PairTensors, tested: np.ndarray) -> float:
    """IIA in B on its tested pairs (`tested` (n,) bool) when B's subspace receives A's source
    coordinates through M; NaN without tested pairs."""
    return tested_iia(model_b, site_b, space_b, pt_b, apply_map(M, za_source), tested)


def tested_iia(model, site: SiteRef, space: Subspace, pt: PairTensors, z: torch.Tensor,
               tested: np.ndarray) -> float:
    """`interchange_right`'s share on the tested pairs (`tested` (n,) bool), running only
    those; NaN without tested pairs."""
    if not tested.any():
        return float("nan")
    idx = torch.from_numpy(np.flatnonzero(tested)).to(pt.base_ids.device)  # (m,)
    return float(interchange_right(model, site, space, pt.take(idx), z[idx]).mean())


def shuffled(za: torch.Tensor, seed: int) -> torch.Tensor:
    """za's rows in a seeded random order (the shuffled-map and chance controls)."""
    g = torch.Generator().manual_seed(seed)
    return za[torch.randperm(len(za), generator=g).to(za.device)]
