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


class DecodeWrite:
    """A's coordinates -> the decoded value -> B's class mean of it."""

    def __init__(self, za: torch.Tensor, zb: torch.Tensor, values: np.ndarray,
                 C: float = 1e4, max_iter: int = 1000):
        """za (n, k_a), zb (n, k_b): A's and B's coordinates at the same fitting sources;
        values (n,) the variable's value at each. `C`: weak regularisation [ours], as the
        decoder is to read what the subspace holds (a few values, many rows): values on a
        ring are separable, and at scikit-learn's C = 1 half of them are lost."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        x = za.detach().double().cpu().numpy()
        values = np.asarray(values)
        self.classes = np.unique(values)  # (c,)
        zb = zb.detach().float()
        self.means = torch.stack([zb[torch.from_numpy(values == v).to(zb.device)].mean(0)
                                  for v in self.classes])  # (c, k_b)
        self.scaler = StandardScaler().fit(x)
        self.clf = None
        if len(self.classes) > 1:
            with warnings.catch_warnings():  # an unfinished fit is still a decoder
                warnings.simplefilter("ignore")
                self.clf = LogisticRegression(C=C, max_iter=max_iter).fit(
                    self.scaler.transform(x), values)

    def decode(self, za: torch.Tensor) -> np.ndarray:
        """(n,) the value decoded from A's coordinates za (n, k_a)."""
        if self.clf is None:
            return np.full(len(za), self.classes[0])
        return self.clf.predict(self.scaler.transform(za.detach().double().cpu().numpy()))

    def __call__(self, za: torch.Tensor) -> torch.Tensor:
        """za (n, k_a) -> B's class means of the decoded values (n, k_b), on za's device."""
        idx = np.searchsorted(self.classes, self.decode(za))
        return self.means[torch.from_numpy(idx).to(self.means.device)].to(za.device)


def source_values(pairs) -> np.ndarray | None:
    """(n,) the source's value of the variable per pair (a `study.tasks.base.Pairs`'s `value`
    stratum), or None where the task's pairs do not name it."""
    values = getattr(pairs, "strata", {}).get("value")
    return None if values is None else np.asarray(values)
