"""The training loop of DAS: the members of one batch trained together, one forward of the
network per step for all of them [ours]; a single alignment is the batch of one member.

A member is one alignment with its own seed (its stream of batches), learning rate and decay
(`Member`). The search (`study/analyses/das/search.py`) puts in one batch every member of one
k that trains independently of the others: the restarts of every trained alignment kind
(`runtime.batch_restarts`), which start each from its own draw or from its own kind's fit at the
previous k, never from another member of the batch. `train` gives each member what training
it alone gives (to float tolerance; `tests/analyses/test_das_batched.py`):

- batch [paper: 128 pairs, model frozen]: member j draws its pairs epoch by epoch from its
  own seeded permutation; the drawn batches are stacked, member j's in rows
  [j * b, (j + 1) * b), and intervened on by one pyvene intervention: the member itself when
  it is alone, else a `StackedAlignment` (`study/analyses/das/stacked.py`), which applies
  member j's alignment to its chunk;
- loss [paper]: the sum over members of each chunk's mean cross entropy of the intervened
  outputs against `cf_labels` at the scored positions, over the task's output ids only, as
  training's loss (`study/core/outputs.py`). The members' parameters are disjoint, so each
  gets exactly the gradient of its own loss;
- optimiser [paper: Adam]: one Adam with one param group per member (each keeps its own
  moments), each group's lr on its own schedule: a cosine from `lr` to `lr * lr_floor` over
  `steps` (`lr_factor`; 1.0 = constant, as `laf_sd`'s);
- stopping [ours; the authors' code stops at an accuracy threshold too]: per member, on its
  own chunk's IIA, after `steps` updates or once the mean IIA of its last `WINDOW` batches
  reaches `stop_iia`, or with `patience` > 0 once that mean has not gained `MIN_GAIN` over
  its best for that many updates. A stopped member leaves the batch: its alignment is not in
  the next forward, so its parameters get no gradient, and Adam, which skips a parameter
  without one, moves it no further (a zero gradient would still move it through the
  momentum). Training ends once every member has stopped.
- snapshots [ours]: given its key (`study/analyses/das/snapshot.py`), `train` saves its whole
  state every `SNAPSHOT_S` seconds and when it ends, and continues from a matching snapshot
  (a finished one: the members restored, nothing trained), so a stopped search resumes to
  the result of one never stopped (bit for bit on a CPU); the only per-update cost is a
  clock read. While it trains, a progress line every `EVERY_S` seconds reaches run.log.
A pair is right when every scored position is right: its argmax among the task's output ids
is its counterfactual label (the rule training scores with).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from study.analyses.common.interchange import rows_right
import study.analyses.das.snapshot as snapshots
from study.analyses.das.stacked import StackedAlignment
from study.analyses.das.update import MIN_GAIN, WINDOW, lr_factor, scored_iv
from study.core.labels import IGNORE
from study.core.logs import PROGRESS
from study.core.progress import EVERY_S

_log = logging.getLogger(__name__)


@dataclass
class Member:
    """One alignment of a batch and how it trains: batches drawn with `seed`, Adam at `lr`
    decaying on a cosine to `lr * lr_floor` (1.0: constant)."""

    inst: torch.nn.Module
    seed: int
    lr: float
    lr_floor: float = 1.0


class Batch:
    """The members trained together, their optimiser and schedule: `update` is one step of
    the loop (what `study/sweep/gpu_time.py` and `bench das` time)."""

    def __init__(self, model, data, members: list[Member], steps: int):
        self.model, self.data, self.members = model, data, list(members)
        self.groups = [[p for p in m.inst.parameters() if p.requires_grad] for m in members]
        one = len(self.members) == 1
        self.inst = (self.members[0].inst if one
                     else StackedAlignment([m.inst for m in self.members]))
        self.inst.to(data.src_train.device)
        self.opt = torch.optim.Adam([{"params": ps, "lr": m.lr}
                                     for m, ps in zip(self.members, self.groups)])
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, [lambda i, f=m.lr_floor: lr_factor(i, steps, f) for m in self.members])
        self.inst.train()

    def update(self, active: list[int], idx: torch.Tensor) -> list[float]:
        """One Adam update of the `active` members (indices into `members`, in chunk order)
        on the pairs `idx` (len(active) * b,) on the data's device, member active[j]'s in
        rows [j * b, (j + 1) * b); returns each one's IIA on its pairs under its pre-update
        alignment."""
        data, m = self.data, len(active)
        if len(self.members) > 1:  # a `StackedAlignment`: which members the rows are for
            self.inst.active = list(active)
        pt = data.train.take(idx)
        iv = data.cached_intervenable(self.model, self.inst)
        # (s, vocab), (s,), (s,): the scored positions' logits, labels and rows
        logits, labels, rows = scored_iv(iv, pt, data.src_train[idx])
        b = len(idx) // m
        chunk = rows // b  # (s,) which member's pair each scored position is
        ce = pt.outputs.loss(logits, labels, reduction="none")  # (s,) 0 where unscored
        scored = (pt.outputs.targets(labels) != IGNORE).to(ce.dtype)  # (s,) as the mean counts
        zeros = torch.zeros(m, dtype=ce.dtype, device=ce.device)
        sums = zeros.index_add(0, chunk, ce)
        counts = zeros.index_add(0, chunk, scored).clamp_min(1)  # (m,)
        loss = (sums / counts).sum()  # each chunk's mean: the member's loss alone
        self.opt.zero_grad(set_to_none=True)
        if loss.requires_grad:  # else the outputs do not read the site: no gradient, no update
            loss.backward()
        self.opt.step()
        self.sched.step()
        right = rows_right(logits.detach(), labels, rows, len(idx), pt.outputs)  # (m * b,)
        return right.view(m, b).float().mean(1).tolist()  # one host sync per step

    def state_dict(self) -> dict:
        """The members' parameters, the optimiser's and the schedule's state (what a
        snapshot keeps of the batch, `study/analyses/das/snapshot.py`)."""
        return {"params": [m.inst.state_dict() for m in self.members],
                "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        for m, params in zip(self.members, state["params"]):
            m.inst.load_state_dict(params)
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])


def train(model, data, members: list[Member], *, steps: int, batch_size: int,
          stop_iia: float, patience: int = 0, snapshot=None) -> list[int]:
    """Fit the members' alignments together on `data` (a `search.SiteData`); returns each
    one's number of updates, as training it alone would. `snapshot` (a
    `study.analyses.das.snapshot.Snapshots` of this call's key), where given: the state is
    saved there every `SNAPSHOT_S` seconds and at the end, and a matching snapshot is
    continued from (a finished one restores the members without training), to the same
    result; while training, a line every `EVERY_S` seconds says how far it is."""
    out = [0] * len(members)
    live = [j for j, m in enumerate(members)
            if any(p.requires_grad for p in m.inst.parameters())]
    if not live or steps == 0:
        return out
    fingerprint = None if snapshot is None else snapshot.fingerprint(data)
    saved = None if snapshot is None else snapshot.load(fingerprint)
    if saved is not None and saved["finished"]:  # nothing left to train
        for j, params in zip(live, saved["params"]):
            members[j].inst.load_state_dict(params)
        return _updates(out, live, saved["done"], steps)
    batch = Batch(model, data, [members[j] for j in live], steps)
    n, n_m = len(data.train), len(live)
    gens = [torch.Generator().manual_seed(int(members[j].seed)) for j in live]  # host-side
    order = [torch.randperm(n, generator=g) for g in gens]
    at = [0] * n_m
    recent: list[list[float]] = [[] for _ in range(n_m)]
    best, best_at = [-1.0] * n_m, [0] * n_m
    done: list[int | None] = [None] * n_m  # updates made, once stopped
    start = 0
    if saved is not None:  # continue where the snapshot stopped
        batch.load_state_dict(saved)
        for g, state in zip(gens, saved["generators"]):
            g.set_state(state)
        order, at, start = saved["order"], saved["at"], saved["step"]
        recent, best, best_at, done = (saved[k] for k in ("recent", "best", "best_at", "done"))
        _log.info(f"das: resumed {snapshot.label()} at update {start:,} from its snapshot")

    def state(i: int) -> dict:
        return {"step": i, "finished": False, **batch.state_dict(),
                "generators": [g.get_state() for g in gens], "order": order, "at": at,
                "recent": recent, "best": best, "best_at": best_at, "done": done}

    saved_at = said_at = time.monotonic()
    for i in range(start, steps):
        active = [j for j in range(n_m) if done[j] is None]
        if not active:
            break
        idx = []
        for j in active:  # each member's own draw
            if at[j] + batch_size > n and at[j] > 0:  # next epoch (a small set is one batch)
                order[j], at[j] = torch.randperm(n, generator=gens[j]), 0
            idx.append(order[j][at[j]:at[j] + batch_size])
            at[j] += batch_size
        iia = batch.update(active, torch.cat(idx).to(data.src_train.device))
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
        if snapshot is None:
            continue
        now = time.monotonic()  # the only per-update cost of snapshots
        if now - saved_at >= snapshots.SNAPSHOT_S:
            snapshot.save(fingerprint, state(i + 1))
            saved_at = now
        if now - said_at >= EVERY_S:
            _log.info(f"das: {snapshot.label()}: {i + 1:,}/{steps:,} updates", extra=PROGRESS)
            said_at = now
    if snapshot is not None:  # finished: the alignments and their updates are all it needs
        snapshot.save(fingerprint, {"step": steps, "finished": True, "done": done,
                                    "params": [members[j].inst.state_dict() for j in live]})
    return _updates(out, live, done, steps)


def _updates(out: list[int], live: list[int], done: list, steps: int) -> list[int]:
    """Each member's number of updates: where it stopped, else the whole budget."""
    for j, d in zip(live, done):
        out[j] = steps if d is None else d
    return out
