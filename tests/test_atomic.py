"""Atomic writes: a reader sees the old version or the new one, durably, and a failed writer
leaves no temporary behind; every writer of run files, checkpoints, das exports and the
dataset cache goes through them."""
import os

import pytest

from study.core import atomic
from study.core.atomic import atomic_dir, atomic_path


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_a_failing_file_writer_keeps_the_old_file_and_no_temporary(tmp_path, error):
    target = tmp_path / "status.json"
    target.write_text("old")
    with pytest.raises(error):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise error()
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_a_file_writer_puts_the_new_content_in_place_with_the_usual_mode(tmp_path):
    target = tmp_path / "sub" / "table.npz"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.endswith(".tmp")
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
    assert list(target.parent.iterdir()) == [target]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("make", [atomic_path, atomic_dir])
def test_the_content_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch, make):
    events = []
    real_fsync, real_replace = atomic.fsync_path, os.replace

    def fsync(p):
        events.append(("fsync", p.name))
        real_fsync(p)

    def replace(a, b):
        events.append(("replace", os.path.basename(b)))
        real_replace(a, b)

    monkeypatch.setattr(atomic, "fsync_path", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "out"
    with make(target) as tmp:
        written = tmp if make is atomic_path else tmp / "w"
        written.write_text("x")
    assert (events.index(("fsync", written.name)) < events.index(("replace", "out"))
            < events.index(("fsync", tmp_path.name)))


@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
def test_a_failing_directory_writer_keeps_the_old_directory_and_no_temporary(tmp_path, error):
    target = tmp_path / "pyvene"
    target.mkdir()
    (target / "index.json").write_text("old")
    with pytest.raises(error):
        with atomic_dir(target) as tmp:
            (tmp / "index.json").write_text("half")
            raise error()
    assert (target / "index.json").read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_a_directory_writer_replaces_the_old_directory_whole(tmp_path):
    target = tmp_path / "step_00000010"
    target.mkdir()
    (target / "state.pt").write_text("old")
    with atomic_dir(target) as tmp:
        (tmp / "meta.json").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["meta.json"]
    assert list(tmp_path.iterdir()) == [target]


def test_a_killed_writers_temporaries_are_recognised_and_removed(tmp_path):
    from study.core.rundir import RunDir
    from study.train import checkpoint

    writers = [make(folder / "x") for folder in (tmp_path, tmp_path / "analyses" / "das",
                                                 tmp_path / "checkpoints")
               for make in (atomic_path, atomic_dir)]
    leftovers = [w.__enter__() for w in writers]  # never exited: as if killed mid-write
    (tmp_path / "analyses" / "das" / "keep.json").write_text("{}")
    removed = RunDir(tmp_path).clean_temporaries()
    checkpoint.clean_temporaries(tmp_path)
    assert set(removed) == set(leftovers[:4])
    assert not any(p.exists() for p in leftovers)
    assert (tmp_path / "analyses" / "das" / "keep.json").exists()


def test_the_dataset_cache_is_written_under_its_own_name(tmp_path, monkeypatch):
    import numpy as np

    from study.core.registry import get
    monkeypatch.setenv("STUDY_CACHE", str(tmp_path))
    entry = get("task", "counting")
    task = entry.obj(entry.make_config("smoke"))
    ex = task.split("val")
    [cached] = (tmp_path / "datasets").iterdir()
    assert cached.name.endswith("-val.npz")
    with np.load(cached) as z:
        assert (z["ids"] == ex.ids).all()
