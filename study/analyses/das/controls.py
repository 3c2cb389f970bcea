"""The controls of a DAS search [ours]: where they run (`control_ks`) and the shuffled-variable
control's pairs (`shuffled_sources`).

Shuffled-variable control (table `das_shuffled`): the search of every trained alignment on the
*trained* network, with the same bases, counterfactual labels, tested pairs, k and budget, but
each pair's cached source vector taken from another pair whose source gives the variable a
*different value*. The labels still say what the pair's own source value would make the base
output, so the variable's values no longer reach the labels: a perfect alignment of the true
variable writes the other pair's value and gives that value's output, which differs from the
label wherever the output depends on the value (counting: a different count ends the response
elsewhere), so its expected IIA is near 0 (the planted test: 1.00 on the true pairs, 0.00
shuffled). A search that still scores high has fitted the labels through something other than
the variable — the bar an alignment of the real variable must clear. Pairs are matched by the
task's `value` stratum (the source's value of the (first) swapped variable: counting); a task
without one (binding, assign_add) is matched by the pair's counterfactual labels, which there
name the value carried (the answer). The reassignment is a seeded permutation of the pairs
(every source vector used once, the sources' distribution unchanged) as far as the values'
counts allow; a pair left without a partner (one value holds more than half the pairs:
counting's phase) draws a source of another value at random, and with one value only a pair
keeps its own, with a warning.

Step-0 control (table `das_control`): the same search on the run's untrained network
(`study.analyses.das.run`). Both controls run at `control_ks` only: by default the largest k
the site holds (`das.control_k=max`), the most expressive subspace and so the highest bar one
k gives; `all` runs every k of the ladder. A control at one k starts from fresh draws (there
is no smaller k to start from), with the search's budget.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import torch


def control_ks(cfg, width: int | None = None) -> tuple[int, ...]:
    """The k the controls run at: `cfg.control_k` = max (the largest k of `cfg.k` that a site
    of `width` dims holds; the largest of all without a width), all (every k), or one k."""
    ks = sorted(cfg.k)
    if cfg.control_k == "all":
        return tuple(ks)
    if cfg.control_k == "max":
        fit = [k for k in ks if width is None or k <= width]
        return (fit[-1] if fit else ks[0],)
    return (int(cfg.control_k),)


def value_keys(pairs) -> np.ndarray:
    """(n,) int: which value of the variable each pair's source carries — the task's `value`
    stratum, else an id of the pair's counterfactual label row."""
    value = getattr(pairs, "strata", {}).get("value")
    if value is not None:
        return np.asarray(value).astype(np.int64)
    cf = np.asarray(pairs.cf_labels)
    return np.unique(cf.reshape(len(cf), -1), axis=0, return_inverse=True)[1].reshape(-1)


def shuffle_by_value(keys: np.ndarray, seed: int) -> np.ndarray:
    """Seeded source indices `perm` ((n,) int): pair i takes pair perm[i]'s source, with
    keys[perm[i]] != keys[i] wherever another value exists. A random permutation, then each
    pair that drew its own value swaps partners with a random pair for which the swap gives
    both another value; where no such swap is left (one value holds more than half the
    pairs), the pair draws a random source of another value instead, so that source is used
    twice. With one value only, every pair keeps a source of its own value."""
    keys = np.asarray(keys)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(keys))
    for i in np.flatnonzero(keys[perm] == keys):
        if keys[perm[i]] != keys[i]:
            continue  # fixed by an earlier swap
        swaps = np.flatnonzero((keys[perm] != keys[i]) & (keys != keys[perm[i]]))
        if len(swaps):
            j = swaps[rng.integers(len(swaps))]
            perm[i], perm[j] = perm[j], perm[i]
            continue
        other = np.flatnonzero(keys != keys[i])
        if len(other):
            perm[i] = other[rng.integers(len(other))]
    return perm


def shuffled_sources(data, train_keys: np.ndarray, test_keys: np.ndarray, seed: int):
    """`data` (a `search.SiteData`) with each split's cached source vectors reassigned across
    its pairs by `shuffle_by_value` (bases, labels, tested pairs and the standardisation's
    activations kept)."""
    out = {}
    for split, keys, s in (("train", train_keys, seed), ("test", test_keys, seed + 1)):
        perm = shuffle_by_value(keys, s)
        same = int((np.asarray(keys)[perm] == np.asarray(keys)).sum())
        if same:
            warnings.warn(f"das: shuffled control: {same} of {len(keys)} {split} pairs found no "
                          f"pair of another value and keep their own source")
        src = getattr(data, f"src_{split}")
        out[f"src_{split}"] = src[torch.as_tensor(perm, device=src.device)]
    return replace(data, _iv={}, **out)
