"""The restarts of one (alignment kind, k) trained together: one forward of the network
per step for all of them (`das.batch_restarts`) [ours].

`train_restarts` is `study.analyses.das.search.train` run for every restart at once, and gives
each restart what it would get alone (float tolerance; `tests/analyses/test_das_batched.py`):

- batch: restart j draws its pairs from its own seeded permutation, exactly as `train`;
  the drawn batches are stacked, restart j's in rows [j * b, (j + 1) * b), and run through
  one `StackedAlignment` (`study/analyses/das/stacked.py`), which applies restart j's alignment
  to its chunk;
- loss: the sum over restarts of each chunk's mean cross entropy over the task's output ids
  (`train`'s loss, `study/core/outputs.py`). The restarts' parameters are disjoint, so each
  gets exactly the gradient of its own loss;
- optimiser: one Adam with one param group per restart (each keeps its own moments); the
  lr schedule is the same for every group, as every restart starts at step 0;
- stopping: `train`'s rules (`stop_iia` on the windowed IIA, `patience`, `steps`) per
  restart, on its own chunk's IIA. A stopped restart leaves the batch: its alignment is
  not in the next forward, so its parameters get no gradient, and Adam, which skips a
  parameter without one, moves it no further (a zero gradient would still move it through
  the momentum). Training ends once every restart has stopped.
"""
from __future__ import annotations

import torch

from study.analyses.common.interchange import rows_right
from study.analyses.das.stacked import StackedAlignment
from study.analyses.das.update import MIN_GAIN, WINDOW, lr_factor, scored_iv
from study.core.labels import IGNORE


def train_restarts(model, data, insts, *, steps: int, batch_size: int, lr: float,
                   stop_iia: float, seeds, patience: int = 0,
                   lr_floor: float = 1.0) -> list[int]:
    """Fit the alignments `insts` (one per restart, same kind and k) together; restart j
    draws its batches with `seeds[j]`. Returns each one's number of updates, as `train`
    would for it alone."""
    groups = [[p for p in inst.parameters() if p.requires_grad] for inst in insts]
    if not all(groups) or steps == 0:
        return [0] * len(insts)
    n_r = len(insts)
    stacked = StackedAlignment(insts).to(data.src_train.device)
    iv = data.intervenable(model, stacked)
    opt = torch.optim.Adam([{"params": ps} for ps in groups], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(i, steps, lr_floor))
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]  # host-side, as `train`
    n = len(data.train)
    order = [torch.randperm(n, generator=g) for g in gens]
    at = [0] * n_r
    recent = [[] for _ in range(n_r)]
    best, best_at = [-1.0] * n_r, [0] * n_r
    done: list[int | None] = [None] * n_r  # updates made, once stopped
    stacked.train()
    for i in range(steps):
        active = [j for j in range(n_r) if done[j] is None]
        if not active:
            break
        idx = []
        for j in active:  # each restart's own draw, as `train` makes it
            if at[j] + batch_size > n and at[j] > 0:  # next epoch (a small set is one batch)
                order[j], at[j] = torch.randperm(n, generator=gens[j]), 0
            idx.append(order[j][at[j]:at[j] + batch_size])
            at[j] += batch_size
        b = len(idx[0])  # every restart's batch has the same size (same n, batch_size)
        rows_idx = torch.cat(idx).to(data.src_train.device)  # (m * b,)
        stacked.active = active
        pt = data.train.take(rows_idx)
        with stacked.cached():  # the members' maps once per forward (every step's call)
            # (s, vocab), (s,), (s,): the scored positions' logits, labels and rows
            logits, labels, rows = scored_iv(iv, pt, data.src_train[rows_idx])
        chunk = rows // b  # (s,) which restart's pair each scored position is
        ce = pt.outputs.loss(logits, labels, reduction="none")  # (s,) 0 where unscored
        scored = (pt.outputs.targets(labels) != IGNORE).to(ce.dtype)  # (s,) as the mean counts
        zeros = torch.zeros(len(active), dtype=ce.dtype, device=ce.device)
        sums = zeros.index_add(0, chunk, ce)
        counts = zeros.index_add(0, chunk, scored).clamp_min(1)  # (m,)
        loss = (sums / counts).sum()  # each chunk's mean, as `train`'s loss of that restart
        opt.zero_grad(set_to_none=True)
        if loss.requires_grad:  # else the outputs do not read the site: no gradient, no update
            loss.backward()
        for j in range(n_r):  # a stopped restart has no gradient: Adam leaves it as it is
            if done[j] is not None:
                for p in groups[j]:
                    p.grad = None
        opt.step()
        sched.step()
        right = rows_right(logits.detach(), labels, rows, len(rows_idx), pt.outputs)  # (m * b,)
        iia = right.view(len(active), b).float().mean(1).tolist()  # one host sync per step
        for j, got in zip(active, iia):
            recent[j] = (recent[j] + [got])[-WINDOW:]
            if len(recent[j]) < WINDOW:
                continue
            mean = sum(recent[j]) / WINDOW
            if mean >= stop_iia:
                done[j] = i + 1
            elif mean > best[j] + MIN_GAIN:
                best[j], best_at[j] = mean, i
            elif patience and i - best_at[j] >= patience:
                done[j] = i + 1
    return [steps if d is None else d for d in done]
