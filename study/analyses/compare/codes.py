"""Network-free codes of a pair's input, answer and position: the controls every cross-run
result is read against [ours].

Two networks that both hold, at the site read, a linear code of the token they have just read
(binding's query letter one token before `:`), of the answer their readout is about to give,
or of where in the sequence they are, stitch into one another whatever else they compute: any
two linear codes of the same few-valued variable are related by a least-squares map. So next
to network → network stitching, each receiving network B is also fed three codes that no
network computed, through the same map (`stitch.fit_map`, fitted on the same pairs) into
the same subspace:

- `input_code`: one-hot of the tokens in the last `window` positions up to the read position
  (offset by offset). Where the pair changes one of them (the token the site has just read),
  this is a code of the changed input token; where it changes a token further back (a
  variable no token at the site carries, e.g. the letter the query's line names), base and
  source have the same code, which then carries nothing. `window_changed` says which.
- `answer_code`: the answer, keyed per scored position relative to the read position: one
  column per (offset from the base position, label) seen in fitting, 1 where the pair's
  answer has that label at that offset (a multi-hot over scored positions; with one scored
  position a one-hot of the answer). The map is fitted on the source rows of the fitting
  pairs (each counterfactual answer -> the source's subspace coordinates, whose value the
  interchange writes) and written with each test pair's counterfactual answer. Base rows
  are left out: a base's labels are kept only where the counterfactual is scored, so a
  counting base whose response runs longer than the counterfactual's has its answer cut
  short (the same key for different counts). Keys relative to the read position, one per
  scored position, make a test pair's key one the fit has seen: counting scores a whole
  response (up to 21 positions, starting anywhere in the sequence), and the whole answer at
  its absolute positions as one key is seen again for 3-6 % of the changed test pairs of the
  demo's counting task (1,000 fitting and 500 test pairs, seeds 0-2); keyed per relative
  position, for 99.8-100 % (the whole relative answer as one key: 94-96 %). A count held
  linearly is the number of response labels (a sum of per-offset columns); the offset of the
  end token one-hot codes it.
- `position_code` (a clock): one-hot of the read position itself (the base position for
  base rows, the source position for source rows), fitted on both rows and written with
  each pair's source position. Where a variable is a function of position (counting's count
  in the demonstration phase is the position, `B` standing at 0), a network's code of it
  stitches like a code of the position.

Coverage: a code can only write what it has a column for. `*_coverage` is the share of the
causal model's changed test pairs whose written key (every (offset, label) of the
counterfactual answer; the source position) was seen in fitting; an unseen entry has no
column, and a key with none seen is written as the intercept alone, so below `MIN_COVERAGE`
the code's IIA is refused (NaN, with the reason in `refusal`): a low number there would be
the fit's gaps, not the network.

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


MIN_COVERAGE = 0.95  # [ours] share of changed test pairs a code must cover to be scored


def answers(pt: PairTensors, relative: bool = True) -> tuple[list[tuple], list[tuple]]:
    """(base answers, counterfactual answers): per pair, the (offset, label) pairs at its
    counterfactual's scored positions, the offset from the pair's base position
    (`relative=False`: the absolute position, the key before it was made relative)."""
    cf, base = pt.cf_labels.cpu().numpy(), pt.base_labels.cpu().numpy()
    start = pt.base_pos.cpu().numpy() if relative else np.zeros(len(cf), np.int64)
    scored = cf != IGNORE
    out_b, out_c = [], []
    for row in range(len(cf)):
        at = np.flatnonzero(scored[row])
        off = (at - start[row]).tolist()
        out_b.append(tuple(zip(off, base[row, at].tolist())))
        out_c.append(tuple(zip(off, cf[row, at].tolist())))
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


class MultiHot:
    """A multi-hot code over the entries seen when fitting: a key is a tuple of entries
    (hashable), each seen entry one column; unseen entries code as nothing."""

    def __init__(self, keys):
        self.index = {e: i for i, e in enumerate(dict.fromkeys(e for k in keys for e in k))}

    def __call__(self, keys, device) -> torch.Tensor:
        out = torch.zeros(len(keys), max(1, len(self.index)), device=device)
        for row, key in enumerate(keys):
            for e in key:
                i = self.index.get(e)
                if i is not None:
                    out[row, i] = 1.0
        return out  # (n, n_entries)

    def covers(self, keys) -> np.ndarray:
        """(n,) bool: every entry of each key was seen in fitting."""
        return np.array([all(e in self.index for e in k) for k in keys], bool)


def coverage(covered: np.ndarray, changed: np.ndarray) -> float:
    """The share of changed pairs (`changed` (n,) bool) whose key is covered (`covered` (n,)
    bool); NaN without changed pairs."""
    changed = np.asarray(changed, bool)
    return float(np.asarray(covered, bool)[changed].mean()) if changed.any() else float("nan")


def refusal(name: str, cover: float, floor: float = MIN_COVERAGE) -> str:
    """Why a code's IIA is refused ("" when it is not): too few changed test pairs covered."""
    if cover >= floor:
        return ""
    said = "no changed test pairs" if np.isnan(cover) else f"{cover:.0%} of changed test pairs"
    return f"{name} not identifiable: {said} covered by keys seen in fitting (needs {floor:.0%})"


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
    """(fit sources' code (n_fit, c): each by its pair's counterfactual answer, test
    counterfactual answers' code (n, c), test code of both rows (2n, c): bases by their
    answer, sources by the counterfactual answer, coverage: the share of changed test pairs
    whose counterfactual answer's every (offset, label) was seen in fitting); on the pairs'
    device."""
    _, fc = answers(fit)
    tb, tc = answers(test)
    code, dev = MultiHot(fc), test.base_ids.device
    cover = coverage(code.covers(tc), test.changed.cpu().numpy())
    return code(fc, dev), code(tc, dev), code(tb + tc, dev), cover


def position_codes(fit: PairTensors, test: PairTensors):
    """(fit rows' code (2n_fit, c): base rows by their base position, then source rows by
    their source position, test sources' code (n, c), test code of both rows (2n, c),
    coverage: the share of changed test pairs whose source position was seen in fitting) of
    the read position (a clock); on the pairs' device."""
    keys = lambda pos: [(int(p),) for p in pos.cpu().numpy()]  # noqa: E731
    fit_keys = keys(fit.base_pos) + keys(fit.source_pos)
    tb, ts = keys(test.base_pos), keys(test.source_pos)
    code, dev = MultiHot(fit_keys), test.base_ids.device
    cover = coverage(code.covers(ts), test.changed.cpu().numpy())
    return code(fit_keys, dev), code(ts, dev), code(tb + ts, dev), cover
