"""Decode-then-write stitching: carry a variable's *value* from run A into run B, not its
coordinates [ours].

The affine map of `stitch` can only relate two codes that are affine images of one another.
Two networks may hold one variable by codes no affine map relates (the same values on a line
in one and on a ring, in another order, in the other), and then affine stitching falls short
however much both hold it: it has less capacity than the network-free codes (`codes`), which
are class means written through a map from a one-hot. Decode-then-write gives stitching the
codes' capacity:

1. decode: a multinomial logistic regression (scikit-learn, on standardised coordinates)
   from A's k aligned coordinates at each fitting pair's source to the variable's value
   there (the pairs' `value` stratum: the source's value of the variable, which the
   interchange carries);
2. write: B's class mean of that value (the mean of B's k coordinates over the fitting
   sources with that value), into B's subspace at the base, as every stitching writes
   (`stitch.tested_iia`).

`decode_iia` is its IIA on B's tested pairs, beside the affine map's `iia`. Pairs without a
`value` stratum (a task whose pairs do not name the source's value) have none (NaN). For a
joint kind (counting's `up_down:full`) the stratum is the first variable's value (the
count), so the written class mean averages over the others (the phase).
"""
from __future__ import annotations

import warnings

import numpy as np
import torch


def decoded(za_fit: torch.Tensor, values: np.ndarray, za: torch.Tensor, C: float = 1e4,
            max_iter: int = 1000) -> np.ndarray:
    """(n,) the value decoded from A's coordinates za (n, k_a) by a classifier fitted on A's
    coordinates za_fit (m, k_a) at the fitting sources, whose values are `values` (m,).
    `C`: weak regularisation [ours], as the decoder is to read what the subspace holds (a
    few values, many rows): values on a ring are separable, and at scikit-learn's C = 1 half
    of them are lost."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    values = np.asarray(values)
    classes = np.unique(values)
    if len(classes) < 2:
        return np.full(len(za), classes[0] if len(classes) else -1)
    x = za_fit.detach().double().cpu().numpy()
    scaler = StandardScaler().fit(x)
    with warnings.catch_warnings():  # an unfinished fit is still a decoder
        warnings.simplefilter("ignore")
        clf = LogisticRegression(C=C, max_iter=max_iter).fit(scaler.transform(x), values)
    return clf.predict(scaler.transform(za.detach().double().cpu().numpy()))


def written(zb_fit: torch.Tensor, values: np.ndarray, decoded_values: np.ndarray) -> torch.Tensor:
    """B's class means (n, k_b) of the decoded values (n,): the mean of B's coordinates
    zb_fit (m, k_b) over the fitting sources with each value (`values` (m,)), on zb_fit's
    device. Every decoded value is one the fit saw."""
    values = np.asarray(values)
    classes = np.unique(values)
    zb = zb_fit.detach().float()
    means = torch.stack([zb[torch.from_numpy(values == v).to(zb.device)].mean(0)
                         for v in classes])  # (c, k_b)
    idx = torch.from_numpy(np.searchsorted(classes, decoded_values)).to(zb.device)
    return means[idx]


def source_values(pairs) -> np.ndarray | None:
    """(n,) the source's value of the variable per pair (a `study.tasks.base.Pairs`'s `value`
    stratum), or None where the task's pairs do not name it."""
    values = getattr(pairs, "strata", {}).get("value")
    return None if values is None else np.asarray(values)
