"""Distributed Alignment Search with cached source activations: the loop behind `das`.

For one (variable, site, position) the pairs' source vectors at the site never change while
an alignment trains (the model is frozen), so they are read once (`SiteData`) and each step
runs only the base forward, with a hook (`models.sites.intervene.intervene`) that applies the
alignment — a pyvene intervention from `analyses/das/alignment.py` — to the base vector and the
cached source vector. A pyvene-only loop would run the source forward at every step as well;
`study/bench_das.py` measures the difference and the tests check both give the same
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

from analyses.das.alignment import cached_maps, make_alignment, tensors_of
from analyses.common.interchange import PairTensors, pair_tensors, scored_end
from models.sites import check_site
from models.sites.capture import gather_site
from models.sites.intervene import intervene
from study.core.network import takes_readout
from tasks.base import IGNORE

_WINDOW = 20  # training batches averaged for early stopping [ours]
_MIN_GAIN = 0.005  # windowed-IIA gain that resets the plateau count (`das.patience`) [ours]


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


def forward(model, data: SiteData, inst, pt: PairTensors, src: torch.Tensor,
            readout: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of the bases `pt` with the alignment interchanging the cached `src` vectors:
    (batch, T, vocab), or with `readout` ((batch, T) bool) only those positions', (n, vocab)."""
    T = scored_end(pt.cf_labels, pt.base_pos)

    def fn(rows, vecs):
        return inst(vecs, src[rows])

    with cached_maps(inst), intervene(model, data.kind, data.layer, pt.base_pos, fn):
        if readout is None:
            return model(pt.base_ids[:, :T])  # (batch, T, vocab)
        if takes_readout(model):
            return model(pt.base_ids[:, :T], readout=readout[:, :T])  # (n, vocab)
        return model(pt.base_ids[:, :T])[readout[:, :T]]  # a model without the option


def scored(model, data: SiteData, inst, pt: PairTensors, src: torch.Tensor):
    """Logits at the scored positions only, (n, vocab), their labels (n,) and each one's row
    (n,): the output layer runs nowhere else."""
    T = scored_end(pt.cf_labels, pt.base_pos)
    mask = pt.cf_labels[:, :T] != IGNORE  # (batch, T)
    return forward(model, data, inst, pt, src, mask), pt.cf_labels[:, :T][mask], mask.nonzero()[:, 0]


def rows_right(logits: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor, n: int):
    """(n,) bool: every scored position of the row is right (rows with none count as right)."""
    wrong = (logits.argmax(-1) != labels).to(torch.int32)
    return torch.zeros(n, dtype=torch.int32, device=logits.device).index_add_(0, rows, wrong) == 0


def step(model, data: SiteData, inst, opt, idx: torch.Tensor) -> torch.Tensor:
    """One Adam update on the pairs `idx`; returns their IIA under the pre-update alignment."""
    pt = data.train.take(idx)
    logits, labels, rows = scored(model, data, inst, pt, data.src_train[idx])
    loss = F.cross_entropy(logits.float(), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return rows_right(logits.detach(), labels, rows, len(idx))


def train(model, data: SiteData, inst, *, steps: int, batch_size: int, lr: float,
          stop_iia: float, seed: int, patience: int = 0) -> int:
    """Fit a trainable alignment; returns the number of updates made. With `patience` > 0
    training also stops once the windowed training IIA has not gained `_MIN_GAIN` over its
    best for that many updates (a plateau)."""
    params = [p for p in inst.parameters() if p.requires_grad]
    if not params or steps == 0:
        return 0
    opt = torch.optim.Adam(params, lr=lr)
    g = torch.Generator().manual_seed(seed)
    n = len(data.train)
    order, at, recent = torch.randperm(n, generator=g), 0, []
    best, best_at = -1.0, 0
    inst.train()
    for i in range(steps):
        if at + batch_size > n and at > 0:  # next epoch (a small set is one batch)
            order, at = torch.randperm(n, generator=g), 0
        idx = order[at:at + batch_size].to(data.src_train.device)
        at += batch_size
        recent = (recent + [float(step(model, data, inst, opt, idx).float().mean())])[-_WINDOW:]
        if len(recent) == _WINDOW:
            mean = sum(recent) / _WINDOW
            if mean >= stop_iia:
                return i + 1
            if mean > best + _MIN_GAIN:
                best, best_at = mean, i
            elif patience and i - best_at >= patience:
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
        logits, labels, rows = scored(model, data, inst, sub, src[lo:lo + batch_size])
        right += int(rows_right(logits, labels, rows, len(sub)).sum())
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
                      stop_iia=cfg.stop_iia, seed=seed + k, patience=cfg.patience)
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
