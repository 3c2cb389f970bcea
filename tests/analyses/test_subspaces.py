"""Principal angles, the subspace a DAS alignment moves, and the subspaces analysis on run
directories holding das-format alignment files."""
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from study.analyses.subspaces.geometry import (alignment_basis, alignment_files, principal_angles,
                                               principal_cosines)
from study.analyses.common.context import AnalysisContext
from study.core import registry
from study.core.errors import UsageError


def _orthogonal(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_principal_cosines_identical_orthogonal_rotated_and_partial():
    Q = _orthogonal(10, 0)
    A = Q[:, :3]
    assert principal_cosines(A, A) == pytest.approx(np.ones(3))
    assert principal_cosines(A, Q[:, 3:6]) == pytest.approx(np.zeros(3), abs=1e-12)
    rotated = A @ _orthogonal(3, 1) @ np.diag([2.0, 0.5, 3.0])  # another basis of the same span
    assert principal_cosines(A, rotated) == pytest.approx(np.ones(3))
    half = np.stack([Q[:, 0], Q[:, 5]], 1)  # shares one direction with A
    assert sorted(principal_cosines(A[:, :2], half)) == pytest.approx([0.0, 1.0], abs=1e-12)
    with pytest.raises(ValueError):
        principal_cosines(A, np.ones((4, 2)))


def test_write_basis_spans_what_an_alignment_moves():
    """x* = unstd(inv(W) applied to [z_src[:k], z_base[k:]]) differs from the base only
    inside the `write` subspace, for an LAF-like (non-orthogonal) W and sigma != 1."""
    d, k = 8, 3
    rng = np.random.default_rng(0)
    M = rng.normal(size=(d, d))
    W = (M @ M.T + 0.1 * np.eye(d)) * rng.choice([-1.0, 1.0], size=d)
    mu, sigma, bias = rng.normal(size=d), rng.uniform(0.5, 2, size=d), rng.normal(size=d)
    base, src = rng.normal(size=(5, d)), rng.normal(size=(5, d))
    z_b, z_s = ((base - mu) / sigma + bias) @ W, ((src - mu) / sigma + bias) @ W
    z = np.concatenate([z_s[:, :k], z_b[:, k:]], 1)
    moved = ((z @ np.linalg.inv(W)) - bias) * sigma + mu - base  # (5, d)
    B = alignment_basis(W, mu, sigma, k, "write")
    for delta in moved:
        assert principal_cosines(delta[:, None], B)[0] == pytest.approx(1.0)
    R = _orthogonal(d, 2)  # an OAF without standardisation: the three views coincide
    views = [alignment_basis(R, np.zeros(d), np.ones(d), k, s)
             for s in ("write", "read", "standardised")]
    for v in views[1:]:
        assert principal_cosines(views[0], v) == pytest.approx(np.ones(k))


def _write_das(run, step, R, variable="x", site="resid[1]@pair", k=2, meta=True):
    d = R.shape[0]
    key = f"oaf/{variable}/{site}/k={k}"
    tensors = {key: R.astype(np.float32), key + "/mu": np.zeros(d, np.float32),
               key + "/sigma": np.ones(d, np.float32), key + "/k": np.array(k)}
    root = run / "analyses" / "das"
    root.mkdir(parents=True, exist_ok=True)
    name = "alignments.safetensors" if meta else f"alignments-{step}.safetensors"
    save_file(tensors, str(root / name), metadata={"checkpoint": str(step)} if meta else None)


def _ctx(run, step, **overrides):
    cfg = registry.get("analysis", "subspaces").make_config("smoke", overrides)
    out = run / "analyses" / "subspaces"
    out.mkdir(parents=True, exist_ok=True)
    return AnalysisContext(None, None, cfg, "attn2", step, torch.device("cpu"), out, 0)


def test_subspaces_across_checkpoints(tmp_path):
    run = tmp_path / "run"
    R = _orthogonal(6, 0)
    rotated_inside = R.copy()
    rotated_inside[:, :2] = R[:, :2] @ _orthogonal(2, 3)  # same span, another basis
    _write_das(run, 100, R, meta=False)
    _write_das(run, 200, rotated_inside, meta=False)
    _write_das(run, 300, R[:, ::-1].copy(), meta=False)  # first 2 columns: orthogonal span
    assert sorted(s for s, _ in alignment_files(run)) == [100, 200, 300]
    analyse = registry.get("analysis", "subspaces").obj
    table = analyse(_ctx(run, 100))["subspaces"]
    assert list(table.columns) == ["checkpoint", "variable", "site", "alignment", "k", "other_run",
                                   "other_checkpoint", "other_site", "mean_cos_angle",
                                   "min_cos_angle"]
    got = dict(zip(table.other_checkpoint, table.mean_cos_angle))
    assert got[200] == pytest.approx(1.0, abs=1e-5) and got[300] == pytest.approx(0.0, abs=1e-5)
    assert set(table.other_run) == {str(run)}  # another run's coordinates are never read
    with pytest.raises(UsageError):
        analyse(_ctx(run, 999))  # no alignments saved for that checkpoint


def test_a_tiny_tilt_between_nearly_equal_subspaces_is_measured_not_rounded_to_zero():
    Q, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((8, 8)))
    A = Q[:, :2]
    for tilt in (1e-9, 1e-6, 1e-3):  # rotate the second basis vector toward a third by `tilt`
        B = np.stack([Q[:, 0], np.cos(tilt) * Q[:, 1] + np.sin(tilt) * Q[:, 2]], 1)
        angles = principal_angles(A, B)
        assert angles[0] == pytest.approx(0.0, abs=1e-12)
        assert angles[1] == pytest.approx(tilt, rel=1e-6)
