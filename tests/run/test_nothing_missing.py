"""Nothing of a finished run goes missing silently: each table or weights file truncated, the
same `run` command makes the run whole again, equal to the undamaged run; what cannot be
remade is named; a full disk is one line in every writer, leaving no folder of its own. A run
stopped during DAS continues its search from the snapshots (`analyses/das/partial/`) to the
same tables, and the snapshot folder, removed once the tables are written, never makes an
analysis look done or damaged."""
from __future__ import annotations

import errno
import shutil
import signal
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from study.core.tables import required_files
from study.train import checkpoint as ckpt
from tests.conftest import SMALL_DAS, TRAINED_COUNTING

SETTINGS = {**TRAINED_COUNTING, **SMALL_DAS, "model": "gru"}


def _rerun(run_dir: Path):
    from study.run.config import resolve
    from study.run.runner import run
    return run(resolve({**SETTINGS, "run_dir": str(run_dir)}))


def _truncate(path: Path) -> None:
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 3])


def _tables(run_dir: Path) -> dict:
    return {str(p.relative_to(run_dir)): pd.read_parquet(p)
            for p in sorted(run_dir.glob("analyses/*/*.parquet"))}


def _weights(run_dir: Path) -> dict:
    return {step: load_file(str(ckpt.checkpoints_dir(run_dir) / ckpt.dir_name(step) / ckpt.WEIGHTS))
            for step in ckpt.list_checkpoints(run_dir)}


def _assert_same(a: Path, b: Path) -> None:
    ta, tb = _tables(a), _tables(b)
    assert ta.keys() == tb.keys()
    for name in ta:
        pd.testing.assert_frame_equal(ta[name], tb[name], check_exact=True, obj=name)
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for step in wa:
        assert wa[step].keys() == wb[step].keys()
        assert all(torch.equal(wa[step][k], wb[step][k]) for k in wa[step]), step
    aligned = "analyses/das/alignments.safetensors"
    la, lb = load_file(str(a / aligned)), load_file(str(b / aligned))
    assert la.keys() == lb.keys() and all(torch.equal(la[k], lb[k]) for k in la)


@pytest.fixture
def copy_of(trained_runs, tmp_path):
    original = trained_runs("gru")
    copy = tmp_path / "run"
    shutil.copytree(original, copy)
    return original, copy


def test_every_declared_table_and_artefact_is_there_after_a_run(trained_runs):
    run_dir = trained_runs("gru")
    for analysis in ("das", "patching"):
        for name in required_files(analysis):
            assert (run_dir / "analyses" / analysis / name).is_file(), name


def test_every_declared_file_is_checked_by_its_kind():
    """A run counts a declared file as damaged by its kind alone (`study.core.damage.readable`:
    a parquet table's footer, a safetensors header), so one file of each kind of each
    analysis below stands for its siblings."""
    kinds = {f.rsplit(".", 1)[1] for a in ("das", "patching") for f in required_files(a)}
    assert kinds == {"parquet", "safetensors"}


# one table of each analysis and the alignments: `_assert_same` compares every table after
@pytest.mark.parametrize("name", ["das/das.parquet", "das/alignments.safetensors",
                                  "patching/patching.parquet"])
def test_a_truncated_table_or_alignment_file_is_recomputed_to_the_same(copy_of, name):
    original, copy = copy_of
    target = copy / "analyses" / name
    _truncate(target)
    _rerun(copy)
    assert target.with_name(target.name + ".damaged").exists()
    _assert_same(original, copy)


def test_a_missing_table_is_recomputed_while_its_siblings_stay(copy_of):
    original, copy = copy_of
    (copy / "analyses" / "das" / "das.parquet").unlink()
    _rerun(copy)
    assert "missing; recomputing it" in (copy / "run.log").read_text()
    _assert_same(original, copy)


def test_a_run_stopped_during_das_continues_it_to_the_same_tables(copy_of, monkeypatch):
    from study.analyses.common.context import PARTIAL
    from study.analyses.das import loop, snapshot
    from study.core.signals import Interrupted
    from study.run import runstate
    original, copy = copy_of
    shutil.rmtree(copy / "analyses" / "das")
    monkeypatch.setattr(snapshot, "SNAPSHOT_S", 0.0)
    update, calls = loop.Batch.update, []

    def stopped(batch, active, idx):  # a SIGTERM after the 30th update, before its snapshot
        out = update(batch, active, idx)
        calls.append(1)
        if len(calls) == 30:
            raise Interrupted(signal.SIGTERM)
        return out

    monkeypatch.setattr(loop.Batch, "update", stopped)
    with pytest.raises(KeyboardInterrupt):
        _rerun(copy)
    partial = copy / "analyses" / "das" / PARTIAL
    assert runstate.state_of(copy) == "interrupted" and any(partial.glob("*.pt"))
    assert not runstate.complete(copy, ["das"])  # snapshots are no tables
    monkeypatch.setattr(loop.Batch, "update", update)
    _rerun(copy)
    log = (copy / "run.log").read_text()
    assert "missing; continuing it from its snapshots (partial/)" in log
    assert "das: resumed up_down:count state@pair k=" in log
    _assert_same(original, copy)
    assert not partial.exists() and runstate.complete(copy, ["das", "patching"])


def test_a_leftover_snapshot_folder_leaves_a_finished_analysis_done_and_unread(copy_of):
    from study.analyses.common.context import PARTIAL
    from study.claims.runs import load_run
    from study.run import runstate
    original, copy = copy_of
    partial = copy / "analyses" / "das" / PARTIAL
    partial.mkdir()
    (partial / "0123.pt").write_bytes(b"not a snapshot")
    (partial / "das.parquet").write_bytes(b"not a table")
    assert runstate.complete(copy, ["das", "patching"])
    tables = {p: p.stat().st_mtime_ns for p in copy.glob("analyses/*/*.parquet")}
    _rerun(copy)
    assert {p: p.stat().st_mtime_ns for p in copy.glob("analyses/*/*.parquet")} == tables
    assert not list(copy.rglob("*.damaged*"))
    assert "recomputing" not in (copy / "run.log").read_text()
    assert load_run(copy).tables.keys() == load_run(original).tables.keys()
    _assert_same(original, copy)


def test_a_truncated_final_checkpoint_is_named_and_retrained_to_the_same_weights(copy_of):
    original, copy = copy_of
    final = ckpt.list_checkpoints(copy)[-1]
    weights = ckpt.checkpoints_dir(copy) / ckpt.dir_name(final) / ckpt.WEIGHTS
    _truncate(weights)
    _rerun(copy)
    log = (copy / "run.log").read_text()
    assert "final checkpoint's model.safetensors is damaged" in log and str(weights) in log
    assert "already finished" not in log.split("damaged")[-1]
    _assert_same(original, copy)


def test_a_truncated_earlier_checkpoint_is_named_and_force_remakes_the_run(copy_of):
    from study.core.errors import UsageError
    original, copy = copy_of
    steps = ckpt.list_checkpoints(copy)
    for step in steps[:-1]:  # each earlier one: no kept training state can remake it
        weights = ckpt.checkpoints_dir(copy) / ckpt.dir_name(step) / ckpt.WEIGHTS
        kept = weights.read_bytes()
        _truncate(weights)
        with pytest.raises(UsageError, match=str(weights)):
            _rerun(copy)
        weights.write_bytes(kept)
    _truncate(ckpt.checkpoints_dir(copy) / ckpt.dir_name(steps[0]) / ckpt.WEIGHTS)
    from study.run.config import resolve
    from study.run.runner import run
    run(resolve({**SETTINGS, "run_dir": str(copy), "force": "true"}))
    _assert_same(original, copy)


def test_report_on_a_full_disk_is_one_line_and_leaves_no_folder(trained_runs, tmp_path,
                                                                 monkeypatch, capsys):
    from study.cli import main
    from study.core import atomic
    real = atomic.fsync_path

    def full(path):  # the disk fills while the report's files are written
        if Path(path).name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path)
    monkeypatch.setattr(atomic, "fsync_path", full)
    out = tmp_path / "new" / "report"
    assert main(["report", str(trained_runs("gru")), f"out={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: no space left on device writing {out}"), err
    assert not (tmp_path / "new").exists()


def test_a_sweep_does_not_count_a_run_with_a_damaged_final_checkpoint_as_finished(copy_of):
    from study.run import runstate
    from study.run.config import resolve
    _, copy = copy_of
    cfg = resolve({**SETTINGS, "run_dir": str(copy)})
    assert runstate.complete(copy, cfg.analysis_settings(), cfg.hash8())
    final = ckpt.list_checkpoints(copy)[-1]
    _truncate(ckpt.checkpoints_dir(copy) / ckpt.dir_name(final) / ckpt.WEIGHTS)
    assert not runstate.complete(copy, cfg.analysis_settings(), cfg.hash8())
