"""The walk of `emergence` (`study/analyses/emergence/analysis.py`): one variable's cell
searched at each chosen checkpoint, from the analysed one back to the earliest, each search
starting from the later checkpoint's alignment (`walk`), and the checkpoints chosen
(`chosen_steps`).

At every checkpoint the pairs are the same and judged once, on the analysed network (as the
atlas's step-0 control is): the tested pairs, and so the IIA's denominator, do not change
along the walk. The network at the checkpoint is read at the cell's role (`atlas.grid.read`,
`cell`), an OAF at the cell's k starts from the later checkpoint's rotation with its
standardisation fitted on this checkpoint's activations (`start`), and trains `steps`
updates (`study/analyses/das/loop.py`); the shuffled control (the variable's values shuffled
across pairs, `study/analyses/das/controls.py`) is trained from scratch at the screening
pass's size (`atlas.grid.screen`).
"""
from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from study.analyses.atlas.grid import cell, read, screen, take_pairs
from study.analyses.common.stats import changed_iia, iia_scores

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """Where a variable is followed: its atlas cell, the k and the atlas's null there."""

    variable: str
    role: str
    site: str
    layer: int
    k: int
    null: float = float("nan")


def chosen_steps(steps, analysed: int, n: int = 0) -> list[int]:
    """The checkpoints a walk scores, latest first: every logged step up to the analysed one
    (`n` = 0), or `n` of them log-spaced (nearest logged step to each of n points evenly
    spaced in log(1 + step), the analysed one and the earliest always among them)."""
    have = sorted({int(s) for s in steps if s <= analysed} | {int(analysed)})
    if n <= 0 or n >= len(have):
        return have[::-1]
    logs = np.log1p(np.asarray(have, float))
    want = np.linspace(logs[0], logs[-1], n)
    picked = {have[int(np.argmin(np.abs(logs - w)))] for w in want}
    for w in want:  # a point that met an already picked step takes the nearest free one
        if len(picked) >= n:
            break
        free = [i for i, s in enumerate(have) if s not in picked]
        picked.add(have[min(free, key=lambda i: abs(logs[i] - w))])
    return sorted(picked, reverse=True)


def start(data, k: int, warm, seed: int):
    """A fresh OAF at k on `data`'s site, standardised on its activations, at `warm`'s
    rotation where given (a later checkpoint's fit; its standardisation is not carried: the
    activations' scale moves as the network trains)."""
    from study.analyses.das.alignment import make_alignment
    width = data.src_train.shape[1]
    inst = make_alignment("oaf", width, min(k, width), seed).to(data.src_train.device)
    inst.fit_standardisation(data.fit_acts)
    if warm is not None and warm.matrix().shape[0] == width:
        with torch.no_grad():
            inst.rotate_layer.weight = warm.matrix().detach().to(data.src_train.device)
    return inst


def _shuffled(data, got, task, role, seed):
    """The cell's data with the variable's values shuffled across its pairs."""
    from study.analyses.das.controls import shuffled_sources, value_keys
    kept = [take_pairs(p, (got.roles[(split, "base")][role] >= 0)
                       & (got.roles[(split, "source")][role] >= 0))
            for split, p in (("train", got.train_pairs), ("test", got.test_pairs))]
    with warnings.catch_warnings():  # a one-value warning, once per checkpoint
        warnings.simplefilter("ignore")
        return shuffled_sources(data, value_keys(kept[0]), value_keys(kept[1]), seed=seed,
                                pairs=tuple(kept), task=task)


def walk(ctx, c: Cell, train_pairs, test_pairs, steps: list[int], first=None,
         seed: int = 0, kept: dict | None = None) -> list[dict]:
    """The rows of `c` at each of `steps` (latest first; the first is `ctx.checkpoint`), the
    search at each starting from the one before (`first`, an alignment, for the first: the
    atlas's own fit; None: a cold start with `cfg.first_steps` updates). `kept`, if given,
    receives each step's fitted alignment."""
    from study.analyses.das.loop import Member, train
    from study.analyses.atlas.build import by_role
    from study.analyses.das.search import pair_right

    cfg, task, bs = ctx.config, ctx.task, ctx.config.eval_batch_size
    site = [(c.site, c.layer)]
    # pairs drawn at the role (counting's) are read at their own positions
    at = c.role if by_role(task) else None
    judge = read(ctx.model, train_pairs, test_pairs, task, site, ctx.device, bs, at_role=at)
    warm, rows = first, []
    for step in steps:
        net = ctx.model if step == ctx.checkpoint else ctx.model_at(step)
        got = judge if net is ctx.model else read(net, train_pairs, test_pairs, task, site,
                                                   ctx.device, bs, judge, at_role=at)
        data = cell(net, got, task, c.role, c.site, c.layer, bs)
        row = dict(checkpoint=ctx.checkpoint, step=step, variable=c.variable, role=c.role,
                   site=c.site, layer=c.layer, k=c.k)
        if data is None:  # no pair holds the role: nothing to score
            rows.append({**row, **iia_scores(np.zeros(0, bool), np.zeros(0, bool),
                                             np.zeros(0, bool), cfg.min_changed),
                         "train_iia": float("nan"), "shuffled_iia": float("nan")})
            continue
        inst = start(data, c.k, warm, seed)
        n = cfg.steps if warm is not None else cfg.first_steps
        train(net, data, [Member(inst, seed, cfg.lr, cfg.lr_floor)], steps=n,
              batch_size=cfg.batch_size, stop_iia=cfg.stop_iia)
        right = {s: pair_right(net, data, inst, s, bs).cpu().numpy() for s in ("train", "test")}
        tested = {s: getattr(data, s).tested.cpu().numpy() for s in ("train", "test")}
        scores = iia_scores(right["test"], data.test.changed.cpu().numpy(), tested["test"],
                            cfg.min_changed)
        shuffled = _shuffled(data, got, task, c.role, seed)
        first_few = torch.arange(len(shuffled.train), device=shuffled.src_train.device)
        shuf = screen(net, [_head(shuffled, first_few[:cfg.screen_pairs])], k=c.k,
                      steps=cfg.screen_steps, batch_size=cfg.screen_batch, lr=cfg.screen_lr,
                      seed=seed, pad_id=task.pad_id, eval_batch_size=bs)[0]
        shuf_scores = iia_scores(shuf.right, data.test.changed.cpu().numpy(), shuffled.test.tested
                                 .cpu().numpy(), cfg.min_changed)
        rows.append({**row, **scores, "train_iia": changed_iia(right["train"], tested["train"]),
                     "shuffled_iia": shuf_scores["iia"]})
        _log.info(f"emergence: {c.variable} at {c.role} {c.site}[{c.layer}], step {step}: "
                  f"IIA {scores['iia']:.3f} (shuffled {shuf_scores['iia']:.3f})")
        warm = inst
        if kept is not None:
            kept[step] = inst
    return rows


def _head(data, rows: torch.Tensor):
    """`data` with only the training pairs `rows` (the screening pass's first pairs)."""
    from dataclasses import replace
    return replace(data, train=data.train.take(rows), src_train=data.src_train[rows],
                   _iv={})
