"""Training data as device tensors, batch by batch: a shuffled stream over a stored split and
an on-the-fly stream for tasks that sample batches (generated in blocks on a background
thread). Batch i is a pure function of (seed, i): the examples at stream positions
[i*B, (i+1)*B) of the concatenation of per-epoch permutations, epoch e's permutation drawn
from a generator seeded by (seed, e), so a resumed run sees the batches it would have seen.
Every batch is trimmed to the longest non-PAD length of the split (data are right-padded
and models causal, so the trimmed positions change nothing). A batch is (ids, targets,
feed): (B, L) token ids, loss targets and the positions a free-running model is fed its own
output at (`feed.feed_mask` of the task's labels, whatever `loss_on` is)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from study.train.config import TrainConfig
from study.train.feed import feed_mask
from study.core.labels import IGNORE


def used_length(ids: np.ndarray, labels: np.ndarray, pad_id: int) -> int:
    """1 + the last position holding a non-PAD token or a scored label, over all rows."""
    used = (ids != pad_id) | (labels != IGNORE)  # (n, seq_len)
    cols = np.flatnonzero(used.any(axis=0))
    return int(cols[-1]) + 1 if cols.size else 1


def to_width(a: np.ndarray, width: int, fill: int) -> np.ndarray:
    """(n, w) integer array of any dtype -> (n, width) int64, cut or filled on the right
    (tasks may store compact dtypes and splits narrower than seq_len)."""
    out = np.full((a.shape[0], width), fill, np.int64)
    w = min(width, a.shape[1])
    out[:, :w] = a[:, :w]
    return out


def loss_targets(ids: torch.Tensor, labels: torch.Tensor, loss_on: str, pad_id: int) -> torch.Tensor:
    """Per-position targets: the scored labels, or (loss_on="all") every next non-PAD token
    with the scored labels taking precedence. (n, L) -> (n, L), IGNORE where unscored."""
    if loss_on == "answer":
        return labels
    nxt = torch.full_like(ids, IGNORE)
    nxt[:, :-1] = ids[:, 1:]
    nxt[nxt == pad_id] = IGNORE
    return torch.where(labels != IGNORE, labels, nxt)


def _epoch_seed(seed: int, epoch: int) -> int:
    state = np.random.SeedSequence([seed % (1 << 64), epoch, 0x5EED]).generate_state(2, np.uint32)
    return int(state[0]) << 31 ^ int(state[1])


class ShuffledStream:
    """Batches of a fixed training split held on the device; batch i = stream positions
    [i*B, (i+1)*B) of the per-epoch permutations (batches may straddle epochs, so every batch
    has the same shape and compiles once)."""

    def __init__(self, ids: np.ndarray, labels: np.ndarray, batch_size: int, seed: int,
                 device: torch.device, loss_on: str, pad_id: int):
        self.n, self.batch_size, self.seed, self.device = len(ids), batch_size, seed, device
        self.seq_len = used_length(ids, labels, pad_id)
        self.tokens_per_batch = batch_size * float((ids != pad_id).sum()) / max(1, self.n)
        self.ids = torch.from_numpy(to_width(ids, self.seq_len, pad_id)).to(device)  # (n, L)
        labels_t = torch.from_numpy(to_width(labels, self.seq_len, IGNORE)).to(device)
        self.targets = loss_targets(self.ids, labels_t, loss_on, pad_id)  # (n, L)
        self.feed = feed_mask(labels_t)  # (n, L) bool
        self._perms: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._perms:
            # drawn on the CPU so the order is the same on every device [ours]
            g = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch))
            self._perms = {e: p for e, p in self._perms.items() if e >= epoch - 1}
            self._perms[epoch] = torch.randperm(self.n, generator=g).to(self.device)
        return self._perms[epoch]

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        epoch, offset = divmod(i * self.batch_size, self.n)
        parts, need = [], self.batch_size
        while need:
            take = min(need, self.n - offset)
            parts.append(self._perm(epoch)[offset:offset + take])
            need, epoch, offset = need - take, epoch + 1, 0
        idx = parts[0] if len(parts) == 1 else torch.cat(parts)  # (B,)
        return self.ids[idx], self.targets[idx], self.feed[idx]  # (B, L) each

    def close(self) -> None:
        pass


def _block(task, start: int, stop: int, batch_size: int, seq_len: int, pad_id: int):
    """Batches [start, stop) of an on-the-fly task as arrays (n, B, seq_len): int16 where the
    vocabulary allows (IGNORE = -1 fits too), a quarter of int64's bytes to copy between
    processes and to the device."""
    exs = [task.train_batch(i, batch_size) for i in range(start, stop)]
    if any(len(e) != batch_size or e.ids.shape[1] > seq_len for e in exs):
        raise ValueError(f"{task.name}.train_batch must give at most {seq_len} positions for "
                         f"each of {batch_size} examples")
    dtype = np.int16 if len(task.vocab) < 1 << 15 else np.int64
    ids = np.stack([to_width(e.ids, seq_len, pad_id) for e in exs]).astype(dtype)
    labels = np.stack([to_width(e.labels, seq_len, IGNORE) for e in exs]).astype(dtype)
    return ids, labels  # (stop - start, B, seq_len) each


_WORKER_TASK = None  # the task a generating process was started with


def _init_worker(task) -> None:
    global _WORKER_TASK
    _WORKER_TASK = task


def _worker_block(start: int, stop: int, batch_size: int, seq_len: int, pad_id: int):
    return _block(_WORKER_TASK, start, stop, batch_size, seq_len, pad_id)


def auto_workers(setting: int, device: torch.device) -> int:
    """Processes that generate on-the-fly batches: `setting` if >= 0, else none on the CPU
    (the training itself uses every core) and up to 8 on CUDA, leaving two cores to the
    training process. On a GPU a small network's step takes about a millisecond while one
    process draws a batch of 512 assign_add sequences in about 3, so one generating thread
    would bound training at a third of the device's speed [measured: 231 steps/s with one]."""
    if setting >= 0:
        return setting
    if device.type != "cuda":
        return 0
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(0, min(8, (cores or 1) - 2))


class OnTheFlyStream:
    """Batches of a task that samples them (`task.train_batch(step, B)`), generated in blocks
    of many steps ahead of training and copied to the device once per block. A block is made
    on a background thread, split over `workers` processes when there are any (batch i is a
    pure function of (seed, i), so the batches do not depend on how many). Batches keep the
    task's full seq_len: a per-block trim would change shapes and recompile."""

    def __init__(self, task, batch_size: int, steps: int, device: torch.device, loss_on: str,
                 workers: int = 0):
        self.task, self.batch_size, self.steps, self.device = task, batch_size, steps, device
        self.loss_on, self.pad_id, self.seq_len = loss_on, task.pad_id, task.seq_len
        self.block = max(1, min(1024, (1 << 22) // (batch_size * self.seq_len)))
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="batches")
        self._procs = None
        if workers > 0:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn: the training process may hold a CUDA context, which a fork must not copy
            self._procs = ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"),
                                              initializer=_init_worker, initargs=(task,))
            self.block = max(self.block, 64 * workers)  # every process gets a share
        self.workers = workers
        self._pending: dict = {}
        self._current, self._data = -1, None
        first = task.train_batch(0, batch_size)
        self.tokens_per_batch = float((first.ids != self.pad_id).sum())

    def _make(self, b: int):
        start, stop = b * self.block, min((b + 1) * self.block, self.steps)
        shape = (self.batch_size, self.seq_len, self.pad_id)
        if self._procs is None:
            ids, labels = _block(self.task, start, stop, *shape)
        else:
            cuts = np.linspace(start, stop, self.workers + 1).astype(int)
            parts = [self._procs.submit(_worker_block, int(a), int(z), *shape)
                     for a, z in zip(cuts[:-1], cuts[1:]) if z > a]
            got = [p.result() for p in parts]
            ids, labels = (np.concatenate([g[j] for g in got]) for j in (0, 1))
        ids, labels = torch.from_numpy(ids), torch.from_numpy(labels)  # (block, B, seq_len)
        if self.device.type == "cuda":
            ids, labels = ids.pin_memory(), labels.pin_memory()
        return ids, labels

    def _submit(self, b: int) -> None:
        if b * self.block < self.steps and b not in self._pending:
            self._pending[b] = self._pool.submit(self._make, b)

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, k = divmod(i, self.block)
        if b != self._current:
            self._submit(b)
            ids, labels = self._pending.pop(b).result()
            self._pending = {c: f for c, f in self._pending.items() if c > b}
            ids = ids.to(self.device, non_blocking=True).long()
            labels = labels.to(self.device, non_blocking=True).long()
            n_blk = ids.shape[0]
            targets = loss_targets(ids.flatten(0, 1), labels.flatten(0, 1), self.loss_on, self.pad_id)
            feed = feed_mask(labels.flatten(0, 1))
            self._data = (ids, targets.view(n_blk, self.batch_size, -1),
                          feed.view(n_blk, self.batch_size, -1))
            self._current = b
            self._submit(b + 1)  # generate the next block while this one trains
        return self._data[0][k], self._data[1][k], self._data[2][k]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._procs is not None:
            self._procs.shutdown(wait=False, cancel_futures=True)


def make_stream(task, cfg: TrainConfig, seed: int, device: torch.device):
    if task.train_batch(0, 1) is not None:
        return OnTheFlyStream(task, cfg.batch_size, cfg.steps, device, cfg.loss_on,
                              auto_workers(cfg.data_workers, device))
    train = task.split("train")
    return ShuffledStream(train.ids, train.labels, cfg.batch_size, seed, device, cfg.loss_on, task.pad_id)
