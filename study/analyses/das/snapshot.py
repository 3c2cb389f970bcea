"""Snapshots of DAS training, so that an interrupted search continues where it stopped [ours].

At the authors' budget (`das.scale=paper`: 20,000 updates of batch 128, 3 restarts [paper
code: grantsrb/mas]) one network's search takes hours on a CPU. Each call of the loop
(`study/analyses/das/loop.train`: one batch of members, some (alignment kind, restart)
trainings at one k) keeps its state in one file under the analysis's `partial/` folder
(`PARTIAL`), written every `SNAPSHOT_S` seconds and when it finishes: each member's
parameters, the Adam and learning-rate schedule states, each member's batch generator, its
permutation of the pairs and place in it, the stopping rule's bookkeeping and the update
index. Re-running the same command loads it and continues from that update, which on a CPU
gives the uninterrupted run's alignments bit for bit (`tests/analyses/test_das_resume.py`);
a finished call's snapshot restores its members without training.

A snapshot is named by its key (`Snapshots.within`: which search — the trained one or a
control —, the checkpoint analysed, variable, site, k, the batch's (kind, restart) members,
the seed) and holds a fingerprint of what its training depends on: the resolved DAS settings
and the pairs (`data_fingerprint`). One whose fingerprint differs is ignored and
overwritten, never loaded. Writes are atomic (`study.core.atomic.atomic_path`), so a kill
mid-write leaves the previous snapshot whole; an unreadable one is named in one warning line
and its trainings start again. The application removes `partial/` once the analysis's tables
are written (`study.analyses.common.context.PARTIAL`); it never counts as a table.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from study.analyses.common.context import PARTIAL
from study.core.atomic import atomic_path, remove_temporaries

SNAPSHOT_S = 60.0  # seconds between a training's snapshots (tests set 0: every update)
VERSION = 1  # of the file's layout; another version is not loaded

_log = logging.getLogger(__name__)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def data_fingerprint(data) -> str:
    """What a training depends on in its pairs (`search.SiteData`): the numbers of pairs, the
    site's width, and the training pairs' token ids, positions and labels (integers: the same
    on every device, unlike the site vectors a later job's GPU may round differently)."""
    h = hashlib.sha256(repr((len(data.train), len(data.test), data.src_train.shape[1])).encode())
    pt = data.train
    for t in (pt.base_ids, pt.source_ids, pt.cf_labels, pt.base_pos, pt.source_pos):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# what a snapshot holds besides its version, key and fingerprint (`study.analyses.das.loop`):
# a training in progress, and one finished
FIELDS = ("step", "finished", "params", "optimizer", "scheduler", "generators", "order", "at",
          "recent", "best", "best_at", "done")
FINISHED = ("step", "finished", "done", "params")


@dataclass(frozen=True)
class Snapshots:
    """Where one analysis keeps its trainings' snapshots (`folder`), the fingerprint of its
    settings, and the key parts named so far (`within` adds more; `train` reads and writes
    the snapshot of the full key)."""

    folder: Path
    settings: str  # digest of the resolved DAS settings
    key: tuple = ()  # ((part, value), ...) in the order given

    @classmethod
    def under(cls, out_dir, cfg) -> "Snapshots":
        """The snapshots of an analysis writing to `out_dir` with settings `cfg` (its frozen
        config dataclass); temporaries a killed write left there are removed (the caller
        holds the run directory's claim)."""
        folder = Path(out_dir) / PARTIAL
        if folder.is_dir():
            remove_temporaries(folder)
        return cls(folder, _digest(asdict(cfg)))

    def within(self, **parts) -> "Snapshots":
        return replace(self, key=self.key + tuple((k, _plain(v)) for k, v in parts.items()))

    @property
    def path(self) -> Path:
        return self.folder / f"{_digest(self.key)[:24]}.pt"

    def label(self) -> str:
        """The training in words, for the log: `up_down:count state@pair k=16 oaf×3,laf_sd×3`
        (a control's search named after it)."""
        parts = dict(self.key)
        kinds: dict = {}
        for name, r in parts.get("members", ()):
            kinds.setdefault(name, []).append(r)
        who = ",".join(f"{n}×{len(rs)}" if len(rs) > 1 else f"{n} restart {rs[0]}"
                       for n, rs in kinds.items())
        text = " ".join(str(p) for p in (parts.get("variable"), parts.get("site")) if p)
        text += f" k={parts['k']}" if "k" in parts else ""
        search = parts.get("search")
        return (f"{text} {who}".strip()
                + (f" ({search})" if search and search != "trained" else ""))

    def fingerprint(self, data) -> str:
        """What a snapshot of this analysis's training on `data` must match: its settings
        and its pairs (`data_fingerprint`)."""
        return _digest([self.settings, data_fingerprint(data)])

    def load(self, fingerprint: str) -> dict | None:
        """The saved state of this key's training, or None: no snapshot, one made with
        another `fingerprint` (other settings or pairs: ignored, the next save overwrites
        it), or an unreadable one (one warning line)."""
        path = self.path
        if not path.is_file():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or state.get("version") != VERSION:
                raise ValueError("not a snapshot of this version")
            if state["key"] != _digest(self.key):
                raise ValueError("another training's key")
            made_for = state["fingerprint"]
            fields = FINISHED if state.get("finished") else FIELDS
            missing = [k for k in fields if k not in state]
            if missing:  # another code version's snapshot under the same key
                raise ValueError(f"no {', '.join(missing)}")
        except Exception as e:  # a truncated zip, a bad pickle, a foreign file: all unusable
            _log.warning(f"das: snapshot {path} is unreadable ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'no detail'}); "
                         f"training {self.label()} from the start")
            return None
        if made_for != fingerprint:
            _log.info(f"das: snapshot {path.name} was made with other settings or pairs; "
                      f"training {self.label()} from the start")
            return None
        return state

    def save(self, fingerprint: str, state: dict) -> None:
        """Write `state` as this key's snapshot, atomically."""
        blob = io.BytesIO()
        torch.save({**state, "version": VERSION, "key": _digest(self.key),
                    "fingerprint": fingerprint}, blob)
        with atomic_path(self.path) as tmp:
            tmp.write_bytes(blob.getvalue())


def _plain(value):
    """A key part made hashable: lists as tuples (the key is digested as JSON)."""
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value
