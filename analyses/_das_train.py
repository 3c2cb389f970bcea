"""Distributed Alignment Search with cached source activations: the loop behind `das`.

For one (variable, site, position) the pairs' source vectors at the site never change while
an alignment trains (the model is frozen), so they are read once (`SiteData`) and each step
runs only the base forward, with a hook (`analyses/_interchange.intervene`) that applies the
alignment — a pyvene intervention from `analyses/_alignment.py` — to the base vector and the
cached source vector. A pyvene-only loop would run the source forward at every step as well;
`analyses/_bench_das.py` measures the difference and the tests check both give the same
logits. Inputs are cut after the last scored position (causal models: nothing scored reads
later tokens).

Training [paper]: Adam lr 1e-3, batch 128, model frozen, loss = cross-entropy of the
intervened outputs against `cf_labels` at the scored positions. [ours] Batches are drawn
epoch by epoch from a seeded permutation; training stops after `steps` updates or once the
mean IIA of the last 20 training batches reaches `stop_iia` [authors' code stops at an
accuracy threshold too]. IIA = fraction of pairs whose every scored position is right.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from analyses._alignment import cached_maps, make_alignment, tensors_of
from analyses._interchange import (PairTensors, all_right, check_site, gather_site, intervene,
                                   pair_tensors, scored_end)
from tasks.base import IGNORE

_WINDOW = 20  # training batches averaged for early stopping [ours]


@dataclass
class SiteData:
    """Pairs of one variable with their source vectors at one site (cached once)."""

    kind: str
    layer: int
    train: PairTensors
    test: PairTensors
    src_train: torch.Tensor  # (n_train, width)
    src_test: torch.Tensor  # (n_test, width)
    fit_acts: torch.Tensor  # (2 n_train, width) base and source vectors: standardisation


def site_data(model, train_pairs, test_pairs, kind: str, layer: int, position: int,
              device, batch_size: int = 512) -> SiteData:
    check_site(model, kind, layer)
    train = pair_tensors(train_pairs, device, position)
    test = pair_tensors(test_pairs, device, position)
    src = lambda pt: gather_site(model, pt.source_ids, kind, layer, pt.source_pos,  # noqa: E731
                                 batch_size)
    src_train, src_test = src(train), src(test)
    base_train = gather_site(model, train.base_ids, kind, layer, train.base_pos, batch_size)
    return SiteData(kind, layer, train, test, src_train, src_test,
                    torch.cat([base_train, src_train]))


def forward(model, data: SiteData, inst, pt: PairTensors, src: torch.Tensor) -> torch.Tensor:
    """Logits of the bases `pt` with the alignment interchanging the cached `src` vectors."""
    T = scored_end(pt.cf_labels, pt.base_pos)

    def fn(rows, vecs):
        return inst(vecs, src[rows])

    with cached_maps(inst), intervene(model, data.kind, data.layer, pt.base_pos, fn):
        return model(pt.base_ids[:, :T])  # (batch, T, vocab)


def step(model, data: SiteData, inst, opt, idx: torch.Tensor) -> torch.Tensor:
    """One Adam update on the pairs `idx`; returns their IIA under the pre-update alignment."""
    pt = data.train.take(idx)
    logits = forward(model, data, inst, pt, data.src_train[idx])
    cf = pt.cf_labels[:, :logits.shape[1]]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), cf.flatten(), ignore_index=IGNORE)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return all_right(logits.detach(), pt.cf_labels)


def train(model, data: SiteData, inst, *, steps: int, batch_size: int, lr: float,
          stop_iia: float, seed: int) -> int:
    """Fit a trainable alignment; returns the number of updates made."""
    params = [p for p in inst.parameters() if p.requires_grad]
    if not params or steps == 0:
        return 0
    opt = torch.optim.Adam(params, lr=lr)
    g = torch.Generator().manual_seed(seed)
    n = len(data.train)
    order, at, recent = torch.randperm(n, generator=g), 0, []
    inst.train()
    for i in range(steps):
        if at + batch_size > n and at > 0:  # next epoch (a small set is one batch)
            order, at = torch.randperm(n, generator=g), 0
        idx = order[at:at + batch_size].to(data.src_train.device)
        at += batch_size
        recent = (recent + [float(step(model, data, inst, opt, idx).float().mean())])[-_WINDOW:]
        if len(recent) == _WINDOW and sum(recent) / _WINDOW >= stop_iia:
            return i + 1
    return steps


@torch.no_grad()
def iia(model, data: SiteData, inst, split: str, batch_size: int = 1000) -> float:
    """Fraction of the split's pairs whose every scored output equals cf_labels."""
    pt, src = (data.train, data.src_train) if split == "train" else (data.test, data.src_test)
    inst.eval()
    right = 0
    for lo in range(0, len(pt), batch_size):
        sub = pt.take(slice(lo, lo + batch_size))
        logits = forward(model, data, inst, sub, src[lo:lo + batch_size])
        right += int(all_right(logits, sub.cf_labels).sum())
    return right / len(pt)


def site_label(kind: str, layer: int, position: int) -> str:
    """Key fragment of a site: "resid[1]@pair", "state@pair", "resid[3]@17"."""
    where = "pair" if position < 0 else str(position)
    return (kind if kind == "state" else f"{kind}[{layer}]") + "@" + where


def search(model, data: SiteData, variable: str, position: int, cfg, seed: int,
           checkpoint: int, progress=None) -> tuple[list[dict], dict]:
    """Every (alignment, k) of the config at one site: table rows and saved tensors."""
    width = data.src_train.shape[1]
    rows, saved = [], {}
    label = site_label(data.kind, data.layer, position)
    for k in cfg.k:
        if k > width:
            print(f"das: k={k} skipped at {label}: the site has {width} dims", file=sys.stderr)
            if progress is not None:
                progress.update(len(cfg.alignments))
            continue
        for a_i, name in enumerate(cfg.alignments):
            inst = make_alignment(name, width, k, seed + 7919 * a_i + k).to(data.src_train.device)
            if cfg.standardize:
                inst.fit_standardisation(data.fit_acts)
            if name != "random":
                train(model, data, inst, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr,
                      stop_iia=cfg.stop_iia, seed=seed + k)
            refuse = False
            if name == "laf":
                cond = inst.condition_number()
                if not cond <= cfg.max_cond:
                    warnings.warn(f"das: LAF for {variable} at {label}, k={k}: cond(A) = "
                                  f"{cond:.3g} > das.max_cond={cfg.max_cond:g}; its inverse is "
                                  f"unreliable, IIA reported as NaN")
                    refuse = True
            for split in ("train", "test"):
                value = float("nan") if refuse else iia(model, data, inst, split,
                                                        cfg.eval_batch_size)
                rows.append(dict(checkpoint=checkpoint, variable=variable, site=data.kind,
                                 layer=data.layer, position=position, alignment=name, k=k,
                                 split=split, iia=value))
            key = f"{name}/{variable}/{label}/k={k}"
            saved.update({key + suffix: t for suffix, t in tensors_of(name, inst).items()})
            if progress is not None:
                progress.update(1)
    return rows, saved
