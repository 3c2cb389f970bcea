"""The atlas's grid: a variable's pairs at one token role of one site (`role_data`), and the
screening pass that trains one alignment at every cell of the grid together (`screen`).

A cell is (variable, role, site). Its pairs are the variable's counterfactual pairs, each
intervened at the role's position in the base and read at the role's position in the
source (`Task.roles` of each sequence; a pair whose base or source lacks the role is left
out of the cell). For a variable whose pairs name their own positions, or the answer
position (binding's aligned pairs: the `:`), a cell at another role intervenes at that role
in base and source instead; the counterfactual label stays the pair's.

Screening [ours]: the cells of one network and one site kind's layer are one DAS loop
(`study/analyses/das/loop.py`): every cell's pairs and cached source vectors are stacked
into one `SiteData`, one OAF per cell at one k is a member of one `StackedAlignment`, and
each update is one forward of the network over every member's batch, each member
intervening on its own rows at its own positions. A cell's score is its test IIA on tested
pairs under its member alone; its training score, which chooses the cells a full search
runs at, is the mean training IIA of its last `WINDOW` batches (the test split never
chooses).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from study.analyses.common.interchange import (PairTensors, judged, pair_tensors,
                                               rows_right, with_base_states)
from study.analyses.das.search import SiteData
from study.core.alignments import REFERENCE
from study.core.labels import IGNORE


def take_pairs(pairs, keep: np.ndarray):
    """The `Pairs` at the (n,) bool `keep`, strata included."""
    return replace(pairs, base_ids=pairs.base_ids[keep], source_ids=pairs.source_ids[keep],
                   base_labels=pairs.base_labels[keep], cf_labels=pairs.cf_labels[keep],
                   base_pos=pairs.base_pos[keep], source_pos=pairs.source_pos[keep],
                   strata={k: np.asarray(v)[keep] for k, v in pairs.strata.items()})


def at_role(pairs, task, role: str):
    """(pairs kept, base positions (n,), source positions (n,)): the pairs whose base and
    source both hold `role`, with the role's position in each."""
    base = task.roles(pairs.base_ids)[role]
    source = task.roles(pairs.source_ids)[role]
    keep = (base >= 0) & (source >= 0)
    return take_pairs(pairs, keep), base[keep], source[keep]


@dataclass
class Read:
    """A variable's pairs judged once (the tested pairs: the judging network's own outputs on
    the bases) and a network's site vectors at every position, read in one forward per
    split and side for every site: what each cell of the grid slices (`cell`)."""

    train_pairs: object  # Pairs
    test_pairs: object
    train: PairTensors  # judged; positions not yet the role's
    test: PairTensors
    acts: dict  # (split, side, kind, layer) -> (n, T, width), side base | source
    roles: dict  # (split, side) -> the task's roles of those sequences (`Task.roles`)


def read(model, train_pairs, test_pairs, task, sites, device, batch_size: int = 512,
         judged_as: "Read | None" = None, at_role: str | None = None) -> Read:
    """`model`'s vectors at every position of every site of `sites` ((kind, layer) list), for
    the bases and sources of both splits; the pairs judged on `model`, or taken judged from
    `judged_as` (the step-0 control scores the trained network's tested pairs). `at_role`:
    pairs drawn at that role (`Task.role_counterfactuals`), whose own positions are the
    role's."""
    from study.models.sites.capture import capture

    if judged_as is None:
        train, test = (judged(model, pair_tensors(p, device, -1, task), batch_size)
                       for p in (train_pairs, test_pairs))
    else:
        train, test = judged_as.train, judged_as.test
    acts = {}
    for split, pt in (("train", train), ("test", test)) if sites else ():
        for side, ids in (("base", pt.base_ids), ("source", pt.source_ids)):
            parts: dict = {}
            for lo in range(0, len(ids), batch_size):
                with torch.no_grad(), capture(model, list(sites)) as got:
                    model(ids[lo:lo + batch_size])
                for site, a in got.items():
                    parts.setdefault(site, []).append(a)
            for (kind, layer), a in parts.items():
                acts[(split, side, kind, layer)] = torch.cat(a)  # (n, T, width)
    if at_role is not None:
        roles = {(split, side): {at_role: np.asarray(getattr(p, f"{side}_pos"), np.int64)}
                 for split, p in (("train", train_pairs), ("test", test_pairs))
                 for side in ("base", "source")}
    else:
        roles = {(split, side): task.roles(getattr(p, f"{side}_ids"))
                 for split, p in (("train", train_pairs), ("test", test_pairs))
                 for side in ("base", "source")}
    return Read(train_pairs, test_pairs, train, test, acts, roles)


def cell(model, got: Read, task, role: str, kind: str, layer: int,
         batch_size: int = 512) -> SiteData | None:
    """The cell (the read variable, `role`, (kind, layer)) as the search takes it
    (`study.analyses.das.search.SiteData`): the pairs whose base and source hold the role,
    intervened at its position in the base with the source's vector at its position; None
    where no pair of a split holds it."""
    out = {}
    for split, pt in (("train", got.train), ("test", got.test)):
        bpos, spos = got.roles[(split, "base")][role], got.roles[(split, "source")][role]
        keep = np.flatnonzero((bpos >= 0) & (spos >= 0))
        if not len(keep):
            return None
        dev = pt.base_ids.device
        t = lambda a: torch.as_tensor(a, dtype=torch.long, device=dev)  # noqa: E731
        sub = replace(pt.take(t(keep)), base_pos=t(bpos[keep]), source_pos=t(spos[keep]))
        out[split] = with_base_states(model, sub, kind, batch_size)
        rows = torch.arange(len(keep), device=dev)
        seq = lambda side: got.acts[(split, side, kind, layer)][t(keep)]  # noqa: E731
        out["src_" + split] = seq("source")[rows, sub.source_pos]  # (n, width)
        if split == "train":
            out["fit"] = torch.cat([seq("base")[rows, sub.base_pos], out["src_train"]])
    return SiteData(kind, layer, out["train"], out["test"], out["src_train"], out["src_test"],
                    out["fit"])


def role_data(model, train_pairs, test_pairs, task, role: str, kind: str, layer: int, device,
              batch_size: int = 512, judge=None) -> SiteData | None:
    """One cell's data (`cell`) from its own reads, the pairs judged on `judge` (None:
    `model`)."""
    judged_as = None if judge is None else read(judge, train_pairs, test_pairs, task, [],
                                                device, batch_size)
    got = read(model, train_pairs, test_pairs, task, [(kind, layer)], device, batch_size,
               judged_as)
    return cell(model, got, task, role, kind, layer, batch_size)


def _pad(t: torch.Tensor, width: int, fill: int) -> torch.Tensor:
    return t if t.shape[1] == width else torch.nn.functional.pad(t, (0, width - t.shape[1]),
                                                                  value=fill)


def cat_tensors(pts: list[PairTensors], pad_id: int) -> PairTensors:
    """Several cells' pairs as one `PairTensors` (ids right-padded with `pad_id`, labels with
    IGNORE, to the widest); base states kept only where every cell has them."""
    width = max(pt.base_ids.shape[1] for pt in pts)
    cat = lambda name, fill: torch.cat([_pad(getattr(pt, name), width, fill)  # noqa: E731
                                        for pt in pts])
    states = (torch.cat([pt.base_states for pt in pts])
              if all(pt.base_states is not None for pt in pts) else None)
    return PairTensors(cat("base_ids", pad_id), cat("source_ids", pad_id),
                       cat("base_labels", IGNORE), cat("cf_labels", IGNORE),
                       torch.cat([pt.base_pos for pt in pts]),
                       torch.cat([pt.source_pos for pt in pts]),
                       all(pt.aligned for pt in pts), pts[0].outputs,
                       torch.cat([pt.base_right for pt in pts]),
                       torch.cat([pt.tested for pt in pts]), states)


@dataclass
class Screened:
    """One cell's screening result: per-pair results on its test pairs and its training
    score."""

    right: np.ndarray  # (n_test,) bool: every scored output is the counterfactual one
    train_iia: float  # mean training IIA of its last WINDOW batches


def screen(model, cells: list[SiteData], k: int, steps: int, batch_size: int, lr: float,
           seed: int, pad_id: int, standardize: bool = True,
           eval_batch_size: int = 1000) -> list[Screened]:
    """Train one OAF at k per cell, all cells (of one network and one site) in one DAS loop
    (one forward of `model` per update for every cell), for `steps` updates of `batch_size`
    pairs each at a constant `lr`; each scored on its own test pairs."""
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.loop import Batch, Member
    from study.analyses.das.update import WINDOW, scored_iv

    if not cells:
        return []
    device = cells[0].src_train.device
    width = cells[0].src_train.shape[1]
    k = min(k, width)
    stacked = SiteData(cells[0].kind, cells[0].layer,
                       cat_tensors([c.train for c in cells], pad_id),
                       cat_tensors([c.test for c in cells], pad_id),
                       torch.cat([c.src_train for c in cells]),
                       torch.cat([c.src_test for c in cells]), cells[0].fit_acts[:0])
    members = []
    for j, c in enumerate(cells):
        inst = make_alignment(REFERENCE, width, k, seed + 7919 * j).to(device)
        if standardize:
            inst.fit_standardisation(c.fit_acts)
        members.append(Member(inst, seed + 7919 * j, lr, 1.0))
    batch = Batch(model, stacked, members, max(steps, 1))
    sizes = [len(c.train) for c in cells]
    offsets = np.cumsum([0] + sizes[:-1])
    gens = [torch.Generator().manual_seed(int(m.seed)) for m in members]
    recent: list[list[float]] = [[] for _ in cells]
    live = [j for j, n in enumerate(sizes) if n > 0]
    for _ in range(steps if live else 0):
        idx = torch.cat([int(offsets[j]) + torch.randint(sizes[j], (batch_size,),
                                                         generator=gens[j]) for j in live])
        for j, got in zip(live, batch.update(live, idx.to(device))):
            recent[j] = (recent[j] + [got])[-WINDOW:]
    # the test pairs: member j on its own rows, every cell padded to the longest by repeating
    # its last pair (the repeats are dropped)
    n_test = [len(c.test) for c in cells]
    top = max(n_test)
    out_right = [np.zeros(n, bool) for n in n_test]
    scored = [j for j, n in enumerate(n_test) if n > 0]
    t_offsets = np.cumsum([0] + n_test[:-1])
    inst = batch.inst
    inst.eval()
    if hasattr(inst, "active"):
        inst.active = list(scored)
    iv = stacked.cached_intervenable(model, inst)
    # pairs per cell and forward: eval_batch_size rows in all, at least 8 a cell (a forward
    # through pyvene costs the same few milliseconds however few its rows)
    per = max(8, eval_batch_size // max(len(scored), 1))
    with torch.no_grad():
        for lo in range(0, top, per):
            cols = np.arange(lo, min(lo + per, top))
            idx = np.concatenate([t_offsets[j] + np.minimum(cols, n_test[j] - 1)
                                  for j in scored])
            idx_t = torch.as_tensor(idx, device=device)
            pt = stacked.test.take(idx_t)
            logits, labels, rows = scored_iv(iv, pt, stacked.src_test[idx_t])
            right = rows_right(logits, labels, rows, len(idx), pt.outputs)
            right = right.view(len(scored), len(cols)).cpu().numpy()
            for r, j in enumerate(scored):
                keep = cols < n_test[j]
                out_right[j][cols[keep]] = right[r][keep]
    return [Screened(out_right[j], float(np.mean(recent[j])) if recent[j] else float("nan"))
            for j in range(len(cells))]
