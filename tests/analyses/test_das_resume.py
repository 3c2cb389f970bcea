"""An interrupted DAS search loses nothing (`study/analyses/das/snapshot.py`): stopped at many
points (mid-training, with some members of a batch already stopped and out of it) and re-run
each time, it gives the uninterrupted search's rows and alignments bit for bit on a CPU with
one thread, redoing only the updates made since the last snapshot; so does the whole `das`
analysis, its trained search and both controls; a finished training is not redone; a
snapshot of other settings is never loaded; a truncated one is named in one warning line and
its training starts again, to the same result; a long training says how far it is and where
it resumed."""
from __future__ import annotations

import copy
import logging
import signal
from dataclasses import replace

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from study.analyses.common.context import PARTIAL, AnalysisContext
from study.analyses.das import DasConfig, loop, snapshot
from study.analyses.das import run as das
from study.analyses.das.search import search, site_data
from study.analyses.das.snapshot import Snapshots
from study.core.registry import get
from study.core.signals import Interrupted
from tests.analyses.test_das import Planted, planted_pairs
from tests.conftest import frozen_smoke_model

WINDOW = 3  # batches in the stopping rule's mean: short, so that members stop within budget
# the planted variable (tests/analyses/test_das.py): every trained kind, three restarts, a k
# ladder with warm starts; the members of a batch stop at different updates (stop_iia or
# plateau), so batches shrink while the others train on
PLANTED = DasConfig(k=(1, 2), steps=30, batch_size=32, lr=1e-2, n_train=256, n_test=128,
                    restarts=3, stop_iia=0.95, patience=4, min_changed=2,
                    alignments=("oaf", "laf", "laf_sd", "random"))
# the das analysis on counting at smoke scale: its trained search and both controls
COUNTING = replace(get("analysis", "das").make_config("smoke"), variables=("up_down:count",),
                   k=(1, 2), steps=12, patience=2, stop_iia=1.0, save_pyvene=False,
                   alignments=("oaf", "laf_sd", "random"))


def _small(mp) -> None:
    """One thread, a snapshot after every update, a short stopping window."""
    torch.set_num_threads(1)
    mp.setattr(snapshot, "SNAPSHOT_S", 0.0)
    mp.setattr(loop, "WINDOW", WINDOW)


@pytest.fixture(autouse=True)
def small(monkeypatch):
    threads = torch.get_num_threads()
    _small(monkeypatch)
    yield
    torch.set_num_threads(threads)


class Updates:
    """Counts `Batch.update` calls; stops the search as a SIGTERM would right after every
    `every`-th update and after the updates numbered in `at`, before its snapshot is
    written."""

    def __init__(self, monkeypatch, every: int = 0, at=()):
        self.calls, self.stops, self.every, self.at, self.shrunk = 0, 0, every, set(at), False
        original = loop.Batch.update

        def update(batch, active, idx):
            out = original(batch, active, idx)
            self.calls += 1
            if (self.every and self.calls % self.every == 0) or self.calls in self.at:
                self.stops += 1
                self.shrunk |= len(active) < len(batch.members)  # some member had stopped
                raise Interrupted(signal.SIGTERM)
            return out

        monkeypatch.setattr(loop.Batch, "update", update)


def _until_done(fn):
    """`fn()` re-run after each stop, as the same command run again would."""
    while True:
        try:
            return fn()
        except KeyboardInterrupt:
            continue


# ----------------------------------------------------------------------------- one search

@pytest.fixture(scope="module")
def planted():
    model = Planted().eval()
    return model, site_data(model, planted_pairs(256, 0), planted_pairs(128, 1), "resid", 0,
                            -1, "cpu")


def _search(planted, folder, cfg=PLANTED):
    model, data = planted
    snaps = Snapshots.under(folder, cfg).within(checkpoint=0, search="trained")
    rows, saved = search(model, data, "v", -1, cfg, seed=0, checkpoint=0, snapshots=snaps)
    return pd.DataFrame(rows), saved


def _assert_same_search(got, want) -> None:
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1].keys() == want[1].keys()
    assert all(torch.equal(got[1][k], want[1][k]) for k in want[1])


@pytest.fixture(scope="module")
def searched(planted, tmp_path_factory):
    """The search run once through: its rows and tensors, folder and number of updates."""
    folder = tmp_path_factory.mktemp("searched")
    with pytest.MonkeyPatch.context() as mp:
        threads = torch.get_num_threads()
        _small(mp)
        counter = Updates(mp)
        got = _search(planted, folder)
        torch.set_num_threads(threads)
    return got, folder, counter.calls


def test_a_search_stopped_many_times_gives_the_uninterrupted_result(planted, searched,
                                                                   tmp_path, monkeypatch):
    want, _, n_updates = searched
    updates = Updates(monkeypatch, every=23)
    got = _until_done(lambda: _search(planted, tmp_path))
    _assert_same_search(got, want)
    assert updates.stops >= 5 and updates.shrunk
    # only the update each stop cut off was made twice; every other one continued
    assert updates.calls == n_updates + updates.stops


def test_a_finished_training_is_restored_not_retrained(planted, searched, monkeypatch):
    want, folder, _ = searched
    updates = Updates(monkeypatch)
    got = _search(planted, folder)  # its snapshots are all finished
    assert updates.calls == 0
    _assert_same_search(got, want)


def test_snapshots_of_other_settings_are_never_loaded(planted, searched, tmp_path,
                                                      monkeypatch):
    _, done, _ = searched
    other = replace(PLANTED, lr=2 * PLANTED.lr)  # the same trainings' keys, other settings
    updates = Updates(monkeypatch)
    want = _search(planted, tmp_path / "fresh", other)
    n_fresh, updates.calls = updates.calls, 0
    (tmp_path / "reused").mkdir()
    for f in (done / PARTIAL).iterdir():  # every snapshot of PLANTED's search
        (tmp_path / "reused" / f.name).write_bytes(f.read_bytes())
    got = _search(planted, tmp_path / "reused", other)
    assert updates.calls == n_fresh  # nothing restored
    _assert_same_search(got, want)
    updates.calls = 0
    _search(planted, tmp_path / "reused", other)
    assert updates.calls == 0  # overwritten by the new settings' snapshots


def test_a_truncated_snapshot_is_named_and_its_training_starts_again(planted, searched,
                                                                     tmp_path, monkeypatch,
                                                                     caplog):
    want, _, _ = searched
    updates = Updates(monkeypatch, every=100)
    with pytest.raises(KeyboardInterrupt):
        _search(planted, tmp_path)
    files = sorted((tmp_path / PARTIAL).glob("*.pt"))
    assert len(files) >= 2  # finished trainings' and the interrupted one's
    for f in files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    updates.every = 0
    with caplog.at_level(logging.WARNING, logger="study"):
        got = _search(planted, tmp_path)
    _assert_same_search(got, want)
    warned = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(warned) == len(files) and all("\n" not in w for w in warned)
    assert {str(f) for f in files} == {w.split()[2] for w in warned}


@pytest.mark.parametrize("field", ["order", "params"])
def test_a_snapshot_missing_a_field_is_named_and_its_training_starts_again(
        planted, searched, tmp_path, monkeypatch, caplog, field):
    """A snapshot of another code version: its key and fingerprint match, a field is gone."""
    import torch
    want, _, _ = searched
    updates = Updates(monkeypatch, every=100)
    with pytest.raises(KeyboardInterrupt):
        _search(planted, tmp_path)
    files = []
    for f in sorted((tmp_path / PARTIAL).glob("*.pt")):
        state = torch.load(f, weights_only=True)
        if field in state:  # a finished training's snapshot keeps no order
            files.append(f)
            del state[field]
            torch.save(state, f)
    assert files
    updates.every = 0
    with caplog.at_level(logging.WARNING, logger="study"):
        got = _search(planted, tmp_path)
    _assert_same_search(got, want)
    warned = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert len(warned) == len(files) and all(f"no {field}" in w for w in warned), warned


def test_a_long_training_says_how_far_it_is_and_where_it_resumed(planted, tmp_path,
                                                                  monkeypatch, caplog):
    monkeypatch.setattr(loop, "EVERY_S", 0.0)
    updates = Updates(monkeypatch, every=10)
    cfg = replace(PLANTED, alignments=("oaf",), k=(2,), restarts=2, stop_iia=1.0, patience=0)
    with caplog.at_level(logging.INFO, logger="study"), pytest.raises(KeyboardInterrupt):
        _search(planted, tmp_path, cfg)
    assert "das: v resid[0]@pair k=2 oaf×2: 9/30 updates" in caplog.messages
    caplog.clear()
    updates.every = 0
    with caplog.at_level(logging.INFO, logger="study"):
        _search(planted, tmp_path, cfg)
    assert ("das: resumed v resid[0]@pair k=2 oaf×2 at update 9 from its snapshot"
            in caplog.messages)


# ----------------------------------------------------------------------------- the analysis

def test_the_das_analysis_stopped_in_each_search_gives_the_uninterrupted_tables(
        tmp_path, monkeypatch, caplog):
    """The trained search and both controls keep snapshots of their own: stopped in each of
    them, the analysis continues each where it stopped, to the same four tables and
    alignments."""
    from study.analyses.das import search as searches
    task, model, _ = frozen_smoke_model("counting", "gru")
    step0 = copy.deepcopy(model)
    with torch.no_grad():
        for p in step0.parameters():
            p.mul_(0.5)  # another network for the step-0 control

    def analysis(out):
        out.mkdir(exist_ok=True)
        ctx = AnalysisContext(model, task, COUNTING, "gru", 7, torch.device("cpu"), out, 0,
                              model_at=lambda step: step0)
        return das(ctx)

    updates, starts, original = Updates(monkeypatch), [], searches.search

    def search_(*args, **kwargs):  # where each search's updates begin
        starts.append(updates.calls)
        return original(*args, **kwargs)

    monkeypatch.setattr(searches, "search", search_)
    want = analysis(tmp_path / "through")
    n_updates = updates.calls
    assert len(want["das_shuffled"]) and len(want["das_control"]) and len(starts) == 3
    # each search stopped after its second update (each stop adds one update made again)
    updates.calls, updates.at = 0, {start + 2 + i for i, start in enumerate(starts)}
    with caplog.at_level(logging.INFO, logger="study"):
        got = _until_done(lambda: analysis(tmp_path / "stopped"))
    assert updates.stops == 3 and updates.calls == n_updates + updates.stops
    resumed = [m for m in caplog.messages if m.startswith("das: resumed")]
    assert [m.endswith("at update 1 from its snapshot") for m in resumed] == [True] * 3
    assert ["(shuffled control)" in resumed[1], "(step-0 control)" in resumed[2]] == [True] * 2
    assert got.keys() == want.keys()
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], check_exact=True, obj=name)
    a, b = (load_file(str(tmp_path / d / "alignments.safetensors")) for d in ("stopped", "through"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)
