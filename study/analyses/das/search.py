"""Distributed Alignment Search through pyvene with cached source activations: the loop
behind `das`.

For one (variable, site, position) the pairs' source vectors at the site never change while
an alignment trains (the model is frozen), so they are read once (`SiteData`) and each step
runs only the base forward: a `pyvene.IntervenableModel` over the site
(`study.models.sites.pyvene_bridge.site_intervenable`, holding the alignment, a pyvene intervention
from `study/analyses/das/alignment.py`) gets the cached vectors as `source_representations`
(`interchange_vectors`). A tutorial-style pyvene loop runs the source forward at every step
as well and reads every position's logits; `study/checks/bench_das.py` measures the difference and
the tests check both give the same logits. Inputs are cut after the last scored position
(causal models: nothing scored reads later tokens) and the network computes the output layer
at the scored positions only (`readout`).

Training [paper]: Adam lr 1e-3, batch 128, model frozen, loss = cross-entropy of the
intervened outputs against `cf_labels` at the scored positions, over the task's output ids
only, as training's loss (`study/core/outputs.py`). [ours] Batches are drawn
epoch by epoch from a seeded permutation; training stops after `steps` updates or once the
mean IIA of the last 20 training batches reaches `stop_iia` [authors' code stops at an
accuracy threshold too]. A pair is right when every scored position is right: its argmax
among the task's output ids is its counterfactual label (the rule training scores with).

Search [ours, so that a larger k does not lose what a smaller k found]: the lr decays on a
cosine to `lr_floor * lr`; each (alignment, k) is trained `restarts` times and the restart
with the best training-split IIA on tested pairs is kept (the test split never chooses);
the restarts train together, one forward over their stacked batches per step, each stopping
by its own rule (`das.batch_restarts`, `study/analyses/das/batched.py`; the sequential `train`
gives the same result);
k runs in increasing order and the first restart of each k starts from the kept alignment of
the previous k of the same kind (`warm_start`; never for `laf_sd`, the authors' LAF trained
their way: constant lr `laf_sd_lr`, fresh draws). No kind starts from another kind's fit.
The spread of test IIA over restarts is reported (`iia_restart_sd`). The controls
(`study/analyses/das/controls.py`) run this same search, the k ladder up to `control_ks`
warm-started as here and with the same restarts and seeds (`ks`). Scores:
`study/analyses/common/stats.py` (IIA on tested pairs, all-pairs IIA, Wilson interval, and
the pair set's chance level, `chance`).
Which pairs test the intervention (`tested`) is decided by running a network on the bases
once without intervention (`study.analyses.common.interchange.judged`): the analysed
network, also for the controls, so every search scores the same pairs.
"""
from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from study.analyses.common.stats import chance_iia, changed_iia, iia_scores
from study.analyses.common.interchange import PairTensors, judged, pair_tensors, rows_right
from study.analyses.das.alignment import (LinearAlignment, OrthogonalAlignment, make_alignment,
                                         tensors_of)
from study.analyses.das.alignments import get as alignment_kind
from study.analyses.das.batched import train_restarts
from study.analyses.das.update import MIN_GAIN, WINDOW, forward_iv, lr_factor, scored_iv
from study.core.sites import check_site, site_key
from study.core.tables import DAS
from study.models.sites.capture import gather_site
from study.models.sites.pyvene_bridge import site_intervenable




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
    _iv: dict = field(default_factory=dict, repr=False)  # the latest alignment's intervenable

    def intervenable(self, model, inst):
        """The `pyvene.IntervenableModel` of `inst` at this site, built once per alignment."""
        key = (id(model), id(inst))
        if key not in self._iv:
            self._iv.clear()  # one alignment trains or is scored at a time
            self._iv[key] = (model, inst, site_intervenable(model, self.kind, self.layer, inst))
        return self._iv[key][2]


def site_data(model, train_pairs, test_pairs, kind: str, layer: int, position: int,
              device, batch_size: int = 512, outputs=None, judge=None) -> SiteData:
    """The pairs of one variable at one site, their source vectors read once. `outputs`: the
    task (its output ids score the pairs, `pair_tensors`); None: every token. `judge`: the
    network whose own outputs on the bases decide which pairs test an intervention
    (`judged`); None: `model` itself (the step-0 control passes the analysed network)."""
    check_site(model, kind, layer)
    judge = model if judge is None else judge
    train = judged(judge, pair_tensors(train_pairs, device, position, outputs), batch_size)
    test = judged(judge, pair_tensors(test_pairs, device, position, train.outputs), batch_size)
    src = lambda pt: gather_site(model, pt.source_ids, kind, layer, pt.source_pos,  # noqa: E731
                                 batch_size)
    src_train, src_test = src(train), src(test)
    base_train = gather_site(model, train.base_ids, kind, layer, train.base_pos, batch_size)
    return SiteData(kind, layer, train, test, src_train, src_test,
                    torch.cat([base_train, src_train]))


def forward(model, data: SiteData, inst, pt: PairTensors, src: torch.Tensor,
            readout: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of the bases `pt` with the alignment interchanging the cached `src` vectors,
    through pyvene: (batch, T, vocab), or with `readout` ((batch, T) bool) only those
    positions', (n, vocab)."""
    return forward_iv(data.intervenable(model, inst), pt, src, readout)


def scored(model, data: SiteData, inst, pt: PairTensors, src: torch.Tensor):
    """Logits at the scored positions only, (n, vocab), their labels (n,) and each one's row
    (n,): the output layer runs nowhere else."""
    return scored_iv(data.intervenable(model, inst), pt, src)


def step(model, data: SiteData, inst, opt, idx: torch.Tensor) -> torch.Tensor:
    """One Adam update on the pairs `idx`; returns their IIA under the pre-update alignment."""
    pt = data.train.take(idx)
    logits, labels, rows = scored(model, data, inst, pt, data.src_train[idx])
    loss = pt.outputs.loss(logits, labels)  # over the task's output ids, as training's
    opt.zero_grad(set_to_none=True)
    if loss.requires_grad:  # else the outputs do not read the site: no gradient, no update
        loss.backward()
    opt.step()
    return rows_right(logits.detach(), labels, rows, len(idx), pt.outputs)


def train(model, data: SiteData, inst, *, steps: int, batch_size: int, lr: float,
          stop_iia: float, seed: int, patience: int = 0, lr_floor: float = 1.0) -> int:
    """Fit a trainable alignment; returns the number of updates made. The lr follows a cosine
    from `lr` to `lr * lr_floor` (1.0 = constant). With `patience` > 0 training also stops once
    the windowed training IIA has not gained `MIN_GAIN` over its best for that many updates
    (a plateau)."""
    params = [p for p in inst.parameters() if p.requires_grad]
    if not params or steps == 0:
        return 0
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(i, steps, lr_floor))
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
        recent = (recent + [float(step(model, data, inst, opt, idx).float().mean())])[-WINDOW:]
        sched.step()
        if len(recent) == WINDOW:
            mean = sum(recent) / WINDOW
            if mean >= stop_iia:
                return i + 1
            if mean > best + MIN_GAIN:
                best, best_at = mean, i
            elif patience and i - best_at >= patience:
                return i + 1
    return steps


@torch.no_grad()
def pair_right(model, data: SiteData, inst, split: str, batch_size: int = 1000) -> torch.Tensor:
    """(n,) bool on the split's pairs: every scored output equals cf_labels."""
    pt, src = (data.train, data.src_train) if split == "train" else (data.test, data.src_test)
    inst.eval()
    return pairs_right(data.intervenable(model, inst), pt, src, batch_size)


@torch.no_grad()
def pairs_right(iv, pt: PairTensors, src: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
    """(n,) bool: each pair's every scored output under the intervenable equals cf_labels
    (pairs `pt`, their cached source vectors `src` (n, width)), in batches."""
    out = []
    for lo in range(0, len(pt), batch_size):
        sub = pt.take(slice(lo, lo + batch_size))
        logits, labels, rows = scored_iv(iv, sub, src[lo:lo + batch_size])
        out.append(rows_right(logits, labels, rows, len(sub), sub.outputs))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool, device=src.device)


def iia(model, data: SiteData, inst, split: str, batch_size: int = 1000) -> float:
    """Fraction of ALL the split's pairs whose every scored output equals cf_labels (Grant et
    al. 2025's IIA; the table's `iia` is over tested pairs, `study/analyses/common/stats.py`)."""
    return float(pair_right(model, data, inst, split, batch_size).float().mean())


@dataclass
class Fit:
    """The restart chosen for one (alignment, k), its per-pair results and the spread."""

    inst: object  # the alignment (best restart), or None when every restart was refused
    right: dict  # split -> (n,) bool numpy
    restart_sd: dict  # split -> standard deviation over restarts of IIA on tested pairs


def fit(model, data: SiteData, name: str, k: int, cfg, seed: int, warm=None,
        label: str = "", variable: str = "", batched: bool | None = None) -> Fit:
    """Best of `cfg.restarts` trainings of one alignment at one k, chosen by training-split IIA
    on tested pairs (never the test split) [ours]. Every alignment kind starts from its own
    draws, never from another kind's fit, so that OAF and the LAFs are compared, not nested:
    - the first restart starts from `warm` (the chosen alignment of the next smaller k, same
      kind), where given: its first k dims contain the smaller subspace, so a solution found
      at k stays reachable at larger k [ours]; an OAF's added dims are the site's
      least-varying directions outside it (`OrthogonalAlignment.extend_from`), so the search
      starts near the smaller k's IIA;
    - every further restart (and the first without `warm`) starts from a fresh seeded draw:
      an OAF at a random rotation, a `rotated` LAF at a random rotation with W = I, an `sd`
      LAF at the authors' random initialisation.
    `laf_sd` is the authors' LAF trained as they train it [paper code: grantsrb/mas]: form
    sd, constant lr `cfg.laf_sd_lr`, never warm-started (the caller passes no `warm`); the
    other kinds use the search's lr and its cosine decay.
    The random control is one untrained draw per k, never warm-started.
    `batched` (default `cfg.batch_restarts`): the restarts train together, one forward for
    all (`study/analyses/das/batched.py`), with the result of training them one after another
    (False) to float tolerance [ours]."""
    width = data.src_train.shape[1]
    tested = {s: getattr(data, s).tested.cpu().numpy() for s in ("train", "test")}
    kind = alignment_kind(name)
    n_restarts = max(1, cfg.restarts) if kind.trained else 1
    if not (kind.trained and kind.warm_start):
        warm = None
    insts = []
    for r in range(n_restarts):
        inst = make_alignment(name, width, k, seed + 104_729 * r, cfg.laf_form).to(
            data.src_train.device)
        if cfg.standardize:
            inst.fit_standardisation(data.fit_acts)
        if r == 0 and warm is not None:
            if isinstance(inst, OrthogonalAlignment) and inst.k > warm.k:
                inst.extend_from(warm, data.fit_acts)
            else:
                inst.load_state_dict(warm.state_dict())
                inst.set_interchange_dim(k)
        insts.append(inst)
    budget = dict(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, stop_iia=cfg.stop_iia,
                  patience=cfg.patience, lr_floor=cfg.lr_floor)
    if kind.lr_setting is not None:  # a constant learning rate (laf_sd: the authors')
        budget.update(lr=getattr(cfg, kind.lr_setting), lr_floor=1.0)
    if batched is None:
        batched = getattr(cfg, "batch_restarts", True)
    if kind.trained and batched and n_restarts > 1:
        train_restarts(model, data, insts, seeds=[seed + r for r in range(n_restarts)],
                       **budget)
    elif kind.trained:
        for r, inst in enumerate(insts):
            train(model, data, inst, seed=seed + r, **budget)
    cands = []
    for r, inst in enumerate(insts):
        if isinstance(inst, LinearAlignment):
            cond = inst.condition_number()
            if not cond <= cfg.max_cond:
                warnings.warn(f"das: LAF for {variable} at {label}, k={k}, restart {r}: cond(A) "
                              f"= {cond:.3g} > das.max_cond={cfg.max_cond:g}; its inverse is "
                              f"unreliable, the restart is refused")
                continue
        right = {s: pair_right(model, data, inst, s, cfg.eval_batch_size).cpu().numpy()
                 for s in ("train", "test")}
        cands.append((changed_iia(right["train"], tested["train"]), r, inst, right))
    if not cands:
        return Fit(None, {}, {})
    best = max(cands, key=lambda c: (c[0], -c[1]))  # ties: the earlier restart
    sd = {s: (float(np.std([changed_iia(c[3][s], tested[s]) for c in cands], ddof=1))
              if len(cands) > 1 else float("nan")) for s in ("train", "test")}
    return Fit(best[2], best[3], sd)


COLUMNS = list(DAS.columns)  # the das, das_shuffled and das_control tables' columns


def search(model, data: SiteData, variable: str, position: int, cfg, seed: int,
           checkpoint: int, progress=None, alignments=None,
           kept: dict | None = None, ks=None) -> tuple[list[dict], dict]:
    """Every (alignment, k) of the config at one site: table rows (`COLUMNS`) and saved
    tensors. k runs in increasing order so each k can start from the previous one's fit of
    the same kind. `alignments`, `ks`: only these kinds and k (default: the config's; the
    controls run at `control_ks`). `kept`, if given, receives the fitted alignments:
    (alignment, variable, site label, k) -> the instance."""
    width = data.src_train.shape[1]
    rows, saved = [], {}
    label = site_key(data.kind, data.layer, position)
    changed = {s: getattr(data, s).changed.cpu().numpy() for s in ("train", "test")}
    tested = {s: getattr(data, s).tested.cpu().numpy() for s in ("train", "test")}
    chance = {s: chance_iia(getattr(data, s).cf_labels.cpu().numpy(), tested[s])
              for s in ("train", "test")}
    names = tuple(alignments or cfg.alignments)
    warm = {}
    for k in sorted(cfg.k if ks is None else ks):
        if k > width:
            logging.getLogger(__name__).warning(f"das: k={k} skipped at {label}: the site has {width} dims")
            if progress is not None:
                progress.update(len(names))
            continue
        for name in names:
            a_seed = seed + 7919 * alignment_kind(name).seed_index + k  # per kind, fixed
            got = fit(model, data, name, k, cfg, a_seed, warm.get(name) if cfg.warm_start
                      else None, label, variable)
            for split in ("train", "test"):
                if got.inst is None:
                    none = np.zeros(0, bool)
                    scores = iia_scores(none, none, none, cfg.min_changed)
                    scores.update(n_pairs=len(changed[split]),
                                  n_changed=int(changed[split].sum()),
                                  n_tested=int(tested[split].sum()))
                else:
                    scores = iia_scores(got.right[split], changed[split], tested[split],
                                        cfg.min_changed)
                rows.append(dict(checkpoint=checkpoint, variable=variable, site=data.kind,
                                 layer=data.layer, position=position, alignment=name, k=k,
                                 split=split, **scores,
                                 iia_restart_sd=got.restart_sd.get(split, float("nan")),
                                 chance=chance[split]))
            # a variable is scored only with enough tested test pairs (both splits' rows)
            if rows[-1]["too_few"]:
                rows[-2].update(iia=float("nan"), iia_lo=float("nan"), iia_hi=float("nan"),
                                too_few=True)
            if got.inst is not None:
                warm[name] = got.inst
                key = f"{name}/{variable}/{label}/k={k}"
                saved.update({key + suffix: t for suffix, t in tensors_of(name, got.inst).items()})
                if kept is not None:
                    kept[(name, variable, label, k)] = got.inst
            if progress is not None:
                progress.update(1)
    return rows, saved
