"""Network-free codes of a pair's input and answer: the two controls every cross-run result is
read against [ours].

Two networks that both hold, at the site read, a linear code of the token they have just read
(binding's query letter one token before `:`), or of the answer their readout is about to
give, stitch into one another whatever else they compute: any two linear codes of the same
few-valued variable are related by a least-squares map. So next to network → network
stitching, each receiving network B is also fed two codes that no network computed, through
the same map (`stitch.fit_map`, fitted on the same pairs) into the same subspace:

- `input_code`: one-hot of the tokens in the last `window` positions up to the read position
  (offset by offset). Where the pair changes one of them (the token the site has just read),
  this is a code of the changed input token; where it changes a token further back (a
  variable no token at the site carries, e.g. the letter the query's line names), base and
  source have the same code, which then carries nothing. `window_changed` says which.
- `answer_code`: one-hot of the answer: the labels at the pair's scored positions (the
  output the readout gives). The map is fitted on base rows (each base's answer -> its
  subspace coordinates) and written with each pair's counterfactual answer.

Everything is read off the pair data (ids, positions, labels), never off the task's name.
"""
from __future__ import annotations

import numpy as np
import torch

from study.analyses.common.interchange import PairTensors
from study.core.labels import IGNORE


def _windows(ids: torch.Tensor, pos: torch.Tensor, window: int) -> np.ndarray:
    """(n, window) token ids at pos - window + 1 .. pos (-1 before the sequence start)."""
    ids, pos = ids.cpu().numpy(), pos.cpu().numpy()
    offsets = np.arange(-window + 1, 1)[None, :]  # (1, window)
    at = pos[:, None] + offsets  # (n, window)
    out = np.take_along_axis(ids, np.clip(at, 0, ids.shape[1] - 1), 1)
    return np.where(at >= 0, out, -1)


def window_keys(pt: PairTensors, window: int) -> tuple[np.ndarray, np.ndarray]:
    """((n, window) base, (n, window) source) tokens up to each read position."""
    return _windows(pt.base_ids, pt.base_pos, window), _windows(pt.source_ids, pt.source_pos,
                                                                window)


def window_changed(pt: PairTensors, window: int) -> np.ndarray:
    """(n,) bool: the pair's base and source differ within the input window."""
    b, s = window_keys(pt, window)
    return (b != s).any(1)


def answers(pt: PairTensors) -> tuple[list[tuple], list[tuple]]:
    """(base answers, counterfactual answers): per pair, the (position, label) pairs at its
    counterfactual's scored positions."""
    cf, base = pt.cf_labels.cpu().numpy(), pt.base_labels.cpu().numpy()
    scored = cf != IGNORE
    out_b, out_c = [], []
    for row in range(len(cf)):
        at = np.flatnonzero(scored[row])
        out_b.append(tuple(zip(at.tolist(), base[row, at].tolist())))
        out_c.append(tuple(zip(at.tolist(), cf[row, at].tolist())))
    return out_b, out_c


class OneHot:
    """A one-hot code over the keys seen when fitting; an unseen key codes as all zeros."""

    def __init__(self, keys):
        self.index = {k: i for i, k in enumerate(dict.fromkeys(keys))}

    def __call__(self, keys, device) -> torch.Tensor:
        out = torch.zeros(len(keys), max(1, len(self.index)), device=device)
        for row, key in enumerate(keys):
            i = self.index.get(key)
            if i is not None:
                out[row, i] = 1.0
        return out  # (n, n_keys)


class WindowCode:
    """One-hot of each window offset's token, concatenated: (n, window) -> (n, sum of the
    tokens seen at each offset)."""

    def __init__(self, windows: np.ndarray):
        self.codes = [OneHot(windows[:, j].tolist()) for j in range(windows.shape[1])]

    def __call__(self, windows: np.ndarray, device) -> torch.Tensor:
        return torch.cat([c(windows[:, j].tolist(), device) for j, c in enumerate(self.codes)],
                         1)


def input_codes(fit: PairTensors, test: PairTensors, window: int):
    """(fit rows' code (2n_fit, c): base rows then source rows, test source code (n, c), test
    code of both rows (2n, c)) of the input window, one-hot by the tokens seen in fitting; on
    the pairs' device."""
    fb, fs = window_keys(fit, window)
    tb, ts = window_keys(test, window)
    code, dev = WindowCode(np.concatenate([fb, fs])), test.base_ids.device
    return (code(np.concatenate([fb, fs]), dev), code(ts, dev),
            code(np.concatenate([tb, ts]), dev))


def answer_codes(fit: PairTensors, test: PairTensors):
    """(fit bases' code (n_fit, c), test counterfactual answers' code (n, c), test code of
    both rows (2n, c): bases by their answer, sources by the counterfactual answer); on the
    pairs' device."""
    fb, _ = answers(fit)
    tb, tc = answers(test)
    code, dev = OneHot(fb), test.base_ids.device
    return code(fb, dev), code(tc, dev), code(tb + tc, dev)
