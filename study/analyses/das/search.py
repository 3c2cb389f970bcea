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

Training (`study/analyses/das/loop.py`) [paper]: Adam lr 1e-3, batch 128, model frozen,
loss = cross-entropy of the intervened outputs against `cf_labels` at the scored positions,
over the task's output ids only, as training's loss; [ours] batches drawn epoch by epoch from
a seeded permutation, a stop on the windowed training IIA (`stop_iia`) or a plateau
(`patience`).

Search [ours, so that a larger k does not lose what a smaller k found]: the lr decays on a
cosine to `lr_floor * lr`; each (alignment, k) is trained `restarts` times and the restart
with the best training-split IIA on tested pairs is kept (the test split never chooses);
the trainings of one k go through the loop in batches (`batches`): a kind's restarts
together (`runtime.batch_restarts`) and, on a GPU, the kinds together (`runtime.batch_kinds`), one
forward over their stacked batches per step, each member stopping by its own rule (one by
one, the same result to float tolerance);
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

from study.analyses.common.identify import ConfoundShares, Confounds
from study.analyses.common.stats import chance_iia, changed_iia, iia_scores
from study.analyses.common.interchange import (PairTensors, judged, pair_tensors, rows_right,
                                               with_base_states)
from study.analyses.das.alignment import make_alignment
from study.analyses.das.alignments import get as alignment_kind
from study.analyses.das.loop import Member, train
from study.analyses.das.update import forward_iv, scored_iv
from study.core.alignments import file_key
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
    # split -> what a network holding only the input window or the answer scores on the
    # split's tested pairs (`study.analyses.common.identify`); empty where the task cannot say
    confounds: dict = field(default_factory=dict)
    _iv: dict = field(default_factory=dict, repr=False)  # the latest alignment's intervenable

    def cached_intervenable(self, model, inst):
        """The `pyvene.IntervenableModel` of `inst` at this site, built once per alignment."""
        key = (id(model), id(inst))
        if key not in self._iv:
            self._iv.clear()  # one alignment trains or is scored at a time
            self._iv[key] = (model, inst, site_intervenable(model, self.kind, self.layer, inst))
        return self._iv[key][2]


def site_data(model, train_pairs, test_pairs, kind: str, layer: int, position: int,
              device, batch_size: int = 512, outputs=None, judge=None,
              source: bool = False, shares: ConfoundShares | None = None) -> SiteData:
    """The pairs of one variable at one site, their source vectors read once. `outputs`: the
    task (its output ids score the pairs, `pair_tensors`); None: every token. `judge`: the
    network whose own outputs on the bases (and with `source` on the sources too) decide
    which pairs test an intervention (`judged`); None: `model` itself (the step-0 control
    passes the analysed network). `shares`: where the pairs' confound shares are kept, so
    that the same pairs read at another site are not scored again; None: computed here."""
    check_site(model, kind, layer)
    judge = model if judge is None else judge
    train = judged(judge, pair_tensors(train_pairs, device, position, outputs), batch_size,
                   source)
    test = judged(judge, pair_tensors(test_pairs, device, position, train.outputs),
                  batch_size, source)
    # the bases' clean states at their steps, read once: a recurrent network's intervened
    # forward starts there (in the evaluation's batches: the same computation as its own)
    train, test = (with_base_states(model, pt, kind, batch_size) for pt in (train, test))
    src = lambda pt: gather_site(model, pt.source_ids, kind, layer, pt.source_pos,  # noqa: E731
                                 batch_size)
    src_train, src_test = src(train), src(test)
    base_train = gather_site(model, train.base_ids, kind, layer, train.base_pos, batch_size)
    shares = ConfoundShares() if shares is None else shares
    return SiteData(kind, layer, train, test, src_train, src_test,
                    torch.cat([base_train, src_train]),
                    confounds={s: shares.of(outputs, pairs, pt) for s, pairs, pt in
                               (("train", train_pairs, train), ("test", test_pairs, test))})


def forward(model, data: SiteData, inst, pt: PairTensors, src: torch.Tensor,
            readout: torch.Tensor | None = None) -> torch.Tensor:
    """Logits of the bases `pt` with the alignment interchanging the cached `src` vectors,
    through pyvene: (batch, T, vocab), or with `readout` ((batch, T) bool) only those
    positions', (n, vocab)."""
    return forward_iv(data.cached_intervenable(model, inst), pt, src, readout)


@torch.no_grad()
def pair_right(model, data: SiteData, inst, split: str, batch_size: int = 1000) -> torch.Tensor:
    """(n,) bool on the split's pairs: every scored output equals cf_labels."""
    pt, src = (data.train, data.src_train) if split == "train" else (data.test, data.src_test)
    inst.eval()
    return pairs_right(data.cached_intervenable(model, inst), pt, src, batch_size)


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


def starts(data: SiteData, name: str, k: int, cfg, seed: int, warm=None) -> list:
    """The alignments the `cfg.restarts` trainings of kind `name` at k start from (one for
    the random control). Every alignment kind starts from its own draws, never from another
    kind's fit, so that OAF and the LAFs are compared, not nested [ours]:
    - the first restart starts from `warm` (the chosen alignment of the next smaller k, same
      kind), where given and the kind is warm-started: its first k dims contain the smaller
      subspace, so a solution found at k stays reachable at larger k [ours]; an OAF's added
      dims are the site's least-varying directions outside it (each class's `warm_from`;
      `OrthogonalAlignment.extend_from`), so the search starts near the smaller k's IIA;
    - every further restart (and the first without `warm`) starts from a fresh draw seeded
      by `seed` and the restart: an OAF at a random rotation, a `rotated` LAF at a random
      rotation with W = I, an `sd` LAF at the authors' random initialisation.
    `laf_sd` (the authors' LAF) is never warm-started; the random control is one untrained
    draw per k."""
    width = data.src_train.shape[1]
    kind = alignment_kind(name)
    if not (kind.trained and kind.warm_start):
        warm = None
    insts = []
    for r in range(max(1, cfg.restarts) if kind.trained else 1):
        inst = make_alignment(name, width, k, seed + 104_729 * r, cfg.laf_form).to(
            data.src_train.device)
        if cfg.standardize:
            inst.fit_standardisation(data.fit_acts)
        if r == 0 and warm is not None:
            inst.warm_from(warm, data.fit_acts, k)
        insts.append(inst)
    return insts


def members(name: str, insts: list, cfg, seed: int) -> list[Member]:
    """The trainings of kind `name` (its restarts `insts`) as members of a batch of the loop
    (`study/analyses/das/loop.py`): restart r draws its batches with `seed + r`, at the
    search's lr and its cosine decay, or at the kind's constant lr (`laf_sd`: the authors'
    `das.laf_sd_lr`) [paper code: grantsrb/mas]; none for the random control (never
    trained)."""
    kind = alignment_kind(name)
    if not kind.trained:
        return []
    lr, floor = cfg.lr, cfg.lr_floor
    if kind.lr_setting is not None:  # a constant learning rate (laf_sd: the authors')
        lr, floor = getattr(cfg, kind.lr_setting), 1.0
    return [Member(inst, seed + r, lr, floor) for r, inst in enumerate(insts)]


def kind_seed(name: str, k: int, seed: int) -> int:
    """The seed of kind `name`'s draws and batches at k: fixed per kind, so adding a kind
    changes no other's."""
    return seed + 7919 * alignment_kind(name).seed_index + k


def batches(names, cfg, device) -> list[list[tuple[str, int]]]:
    """Which trainings of one k (each (kind, restart), the trained kinds of `names`) train
    together, one batch of the loop each: a kind's restarts with `cfg.batch_restarts`, the
    kinds with `cfg.batch_kinds` (auto: on a GPU, `device` a torch device or its type). They
    are independent (each starts from its own draw or its own kind's fit at the previous k),
    so any grouping gives what training each alone gives, to float tolerance [ours]."""
    kinds = {"on": True, "off": False}.get(cfg.batch_kinds,
                                           torch.device(device).type == "cuda")
    groups: dict = {}
    for name in names:
        if not alignment_kind(name).trained:
            continue
        for r in range(max(1, cfg.restarts)):
            key = (None if kinds else name, None if cfg.batch_restarts else r)
            groups.setdefault(key, []).append((name, r))
    return list(groups.values())


def fit(model, data: SiteData, names, k: int, cfg, seed: int, warm: dict | None = None,
        label: str = "", variable: str = "", snapshots=None) -> dict[str, Fit]:
    """Every alignment kind of `names` at one k: each kind's restarts (`starts`, from
    `warm[name]` where given) trained in the batches of `batches` (one forward of the network
    per step for each batch, `study/analyses/das/loop.py`), and each kind's best chosen
    (`choose`). `snapshots`: where each batch's training keeps its snapshots
    (`study/analyses/das/snapshot.py`), keyed further by k, the batch's members and `seed`;
    None: none kept."""
    warm = warm or {}
    insts = {name: starts(data, name, k, cfg, kind_seed(name, k, seed), warm.get(name))
             for name in names}
    trainings = {(name, r): m for name in names
                 for r, m in enumerate(members(name, insts[name], cfg, kind_seed(name, k, seed)))}
    budget = dict(steps=cfg.steps, batch_size=cfg.batch_size, stop_iia=cfg.stop_iia,
                  patience=cfg.patience)
    for group in batches(names, cfg, data.src_train.device):
        snapshot = (None if snapshots is None
                    else snapshots.within(k=k, members=group, seed=seed))
        train(model, data, [trainings[key] for key in group], **budget, snapshot=snapshot)
    return {name: choose(model, data, name, insts[name], cfg, k, label, variable)
            for name in names}


def choose(model, data: SiteData, name: str, insts: list, cfg, k: int, label: str = "",
           variable: str = "") -> Fit:
    """The best of one kind's trained restarts at k, by training-split IIA on tested pairs
    (never the test split; ties: the earlier restart) [ours], and the spread over restarts.
    A restart whose cond(A) exceeds `cfg.max_cond` is refused (its inverse is not trusted:
    a LAF's; a rotation's is 1)."""
    tested = {s: getattr(data, s).tested.cpu().numpy() for s in ("train", "test")}
    cands = []
    for r, inst in enumerate(insts):
        cond = inst.condition_number()
        if not cond <= cfg.max_cond:
            warnings.warn(f"das: {name} for {variable} at {label}, k={k}, restart {r}: cond(A) "
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


def _confound_columns(data: SiteData, split: str) -> dict:
    c = data.confounds.get(split, Confounds(float("nan"), float("nan")))
    return {"confound_input": c.input, "confound_answer": c.answer}


def search(model, data: SiteData, variable: str, position: int, cfg, seed: int,
           checkpoint: int, progress=None, alignments=None,
           kept: dict | None = None, ks=None, snapshots=None) -> tuple[list[dict], dict]:
    """Every (alignment, k) of the config at one site: table rows (`COLUMNS`) and saved
    tensors. k runs in increasing order so each k can start from the previous one's fit of
    the same kind. `alignments`, `ks`: only these kinds and k (default: the config's; the
    controls run at `control_ks`). `kept`, if given, receives the fitted alignments:
    (alignment, variable, site label, k) -> the instance. `snapshots`: where the trainings
    keep their snapshots (`study/analyses/das/snapshot.py`; keyed by the caller with which
    search this is, and here by variable and site), so an interrupted search continues;
    None: none kept."""
    width = data.src_train.shape[1]
    rows, saved = [], {}
    label = site_key(data.kind, data.layer, position)
    changed = {s: getattr(data, s).changed.cpu().numpy() for s in ("train", "test")}
    tested = {s: getattr(data, s).tested.cpu().numpy() for s in ("train", "test")}
    chance = {s: chance_iia(getattr(data, s).cf_labels.cpu().numpy(), tested[s])
              for s in ("train", "test")}
    names = tuple(alignments or cfg.alignments)
    if snapshots is not None:
        snapshots = snapshots.within(variable=variable, site=label, position=position)
    warm = {}
    if ks is None and min(cfg.k) > width:  # nothing would be trained: refused, not an empty table
        from study.core.errors import UsageError
        raise UsageError(f"das.k={','.join(map(str, cfg.k))}: every k is larger than {label}, "
                         f"which has {width} dims; give k of at most {width}")
    for k in sorted(cfg.k if ks is None else ks):
        if k > width:
            logging.getLogger(__name__).warning(f"das: k={k} skipped at {label}: the site has {width} dims")
            if progress is not None:
                progress.update(len(names))
            continue
        fits = fit(model, data, names, k, cfg, seed, warm if cfg.warm_start else None,
                   label, variable, snapshots)
        for name in names:
            got = fits[name]
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
                                 chance=chance[split], **_confound_columns(data, split)))
            # a variable is scored only with enough tested test pairs (both splits' rows)
            if rows[-1]["too_few"]:
                rows[-2].update(iia=float("nan"), iia_lo=float("nan"), iia_hi=float("nan"),
                                too_few=True)
            if got.inst is not None:
                warm[name] = got.inst
                key = file_key(name, variable, label, k)
                saved.update({key + suffix: t for suffix, t in got.inst.saved_tensors().items()})
                if kept is not None:
                    kept[(name, variable, label, k)] = got.inst
            if progress is not None:
                progress.update(1)
    return rows, saved
