"""Device correctness: every registered analysis, and the comparison across runs, makes its
tensors on the device of the network and the data it works on, for every registered model
family it applies to.

On a GPU a tensor made without `device=` lands on the CPU and fails beside the CUDA network
("Expected all tensors to be on the same device"); on a CPU-only machine it passes unseen.
Here the networks and the data are built on the CPU and the analyses run inside
`implicit_device_on_meta()` (`tests/analyses/implicit_device.py`): a tensor our code makes
without a device lands on `meta` there and fails as soon as it meets a CPU one, where a CPU
tensor would meet a CUDA one on a GPU. Every case also asserts that no such tensor was made
at all, so one that happens to meet nothing (or that `meta` lets pass) is caught too.

Each analysis runs on two tasks, picked from the registry by the layout of their
counterfactual pairs (the shortest task of each): pairs at explicit positions (counting's)
and aligned pairs (base and source at the same positions), which take different paths
through patching, DAS and the comparison. Settings are the smoke presets cut to a few pairs,
steps and sequences: what is checked is that every path runs, not what it finds.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from study.analyses.common.context import AnalysisContext
from study.analyses.das.alignment import OrthogonalAlignment
from study.core import registry
from study.core.tables import check_outputs
from tests.analyses.implicit_device import ROOT, implicit_device_on_meta
from tests.conftest import frozen_smoke_model, project_entries

# Per analysis, its smoke preset cut further (a few pairs, steps, sequences); an analysis not
# named here runs at its plain smoke preset. das keeps two k (the second starts from the
# first: `OrthogonalAlignment.extend_from`) and the preset's two restarts (trained together),
# and leaves out its control, the same search again on the step-0 network.
TINY = {
    "das": {"k": "1,2", "steps": "2", "controls": "false", "n_train": "32", "n_test": "32",
            "batch_size": "16", "eval_batch_size": "16"},
    "patching": {"n_pairs": "4", "batch_size": "16"},
    "probes": {"n_examples": "24", "positions": "1,2", "max_iter": "5", "max_pooled": "64"},
    "circuits": {"n_examples": "8", "n_induction": "4", "trajectory": "true"},
    "atlas": {"n_train": "16", "n_test": "16", "screen_pairs": "16", "screen_steps": "1",
              "screen_batch": "8", "steps": "1", "batch_size": "8", "eval_batch_size": "16"},
}
STEP = 5  # the analysed checkpoint; `model_at` hands out the untrained network for others
LAYOUTS = ("explicit", "aligned")  # where a task's counterfactual pairs are intervened at


# ----------------------------------------------------------------------------- the check itself

def test_a_larger_k_extends_a_smaller_oaf_on_the_device_the_alignment_lives_on():
    """The fault that failed every GPU run: the basis completing the smaller alignment was
    built on the CPU beside the alignment's own (CUDA) matrix."""
    prev, new = OrthogonalAlignment(16, 2), OrthogonalAlignment(16, 4)
    acts = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))  # (n, d)
    with implicit_device_on_meta() as made:
        new.extend_from(prev, acts)
    assert made == []
    R = new.matrix().detach()  # (d, d)
    assert torch.allclose(R[:, :2], prev.matrix().detach()[:, :2], atol=1e-5)  # keeps prev's
    assert torch.allclose(R.T @ R, torch.eye(16), atol=1e-5)


def test_the_check_fails_a_device_free_tensor_of_ours_and_nothing_else():
    x = torch.ones(3)  # the "device" data, as a CUDA tensor on a GPU
    ours = str(ROOT / "study" / "analyses" / "_made_here.py")  # code that runs as if it were ours

    def run(src, filename):
        return eval(compile(src, filename, "eval"), {"torch": torch, "x": x})

    from study.models.sites.pyvene_loader import pyvene
    with implicit_device_on_meta() as made:
        with pytest.raises(RuntimeError, match="meta"):
            run("torch.eye(3) @ x", ours)
        run("torch.eye(3, device=x.device) @ x", ours)  # an explicit device
        run("torch.as_tensor(x) + x", ours)  # a tensor's own device
        run("torch.randn(3, generator=torch.Generator()).to(x.device) + x", ours)  # a seeded draw
        run("torch.eye(3) @ x", __file__)  # not our code (here: a test)
        pyvene().models.layers.RotateLayer(3)(x)  # a library's own tensors (pyvene's)
    assert made == ["study/analyses/_made_here.py:1 torch.eye"]


# ----------------------------------------------------------------------------- every analysis

@functools.lru_cache(maxsize=None)
def _task_of(layout: str) -> str | None:
    """The registered task with the shortest sequences whose pairs (its first causal
    variable's) have `layout`; None if no task's do."""
    found = []
    for name, entry in project_entries("task").items():
        task = entry.obj(entry.make_config("smoke"))
        pairs = task.counterfactuals(task.causal_variables[0], 2, split="test", seed=0)
        aligned = bool((np.asarray(pairs.base_pos) < 0).all())
        if ("aligned" if aligned else "explicit") == layout:
            found.append((task.seq_len, name))
    return min(found)[1] if found else None


def _task_or_skip(layout: str) -> str:
    name = _task_of(layout)
    if name is None:
        pytest.skip(f"no registered task has {layout} pairs")
    return name


def _cases():
    return [(layout, m_name, a_name) for layout in LAYOUTS
            for m_name, model in project_entries("model").items()
            for a_name, analysis in project_entries("analysis").items()
            if analysis.requires <= model.capabilities]


def _tiny(a_name: str, task) -> dict:
    over = dict(TINY.get(a_name, {}))
    if a_name == "das":  # one variable runs every path
        over["variables"] = task.causal_variables[0]
    if a_name == "probes":
        over["variables"] = task.probe_variable_names[0]
    return over


_RUNS: dict = {}  # (task, model) -> the run directory its analyses write into, shared


def _run_dir(tmp_path_factory, t_name: str, m_name: str):
    if (t_name, m_name) not in _RUNS:
        _RUNS[(t_name, m_name)] = tmp_path_factory.mktemp(f"{t_name}-{m_name}")
    return _RUNS[(t_name, m_name)]


def _context(t_name: str, m_name: str, a_name: str, run_dir):
    """The analysis' context as the application builds it, on the CPU: the untrained smoke
    network (frozen), and `model_at` handing out another for any other step."""
    task, model, _ = frozen_smoke_model(t_name, m_name)
    _, untrained, _ = frozen_smoke_model(t_name, m_name)
    entry = registry.get("analysis", a_name)
    out = run_dir / "analyses" / a_name
    out.mkdir(parents=True, exist_ok=True)
    ctx = AnalysisContext(model, task, entry.make_config("smoke", _tiny(a_name, task)), m_name,
                          STEP, torch.device("cpu"), out, 0, model_at=lambda step: untrained,
                          steps=(0, STEP), analysis_dir=lambda name: run_dir / "analyses" / name)
    return ctx, entry


def _das_alignments(t_name: str, m_name: str, run_dir):
    """The run's das alignments at STEP: those the das case left, else made here (set-up,
    outside the check)."""
    path = run_dir / "analyses" / "das" / "alignments.safetensors"
    if not path.exists():
        ctx, entry = _context(t_name, m_name, "das", run_dir)
        entry.obj(ctx)
    return path


def _das_at_two_checkpoints(t_name: str, m_name: str, run_dir) -> None:
    """`subspaces` compares a run's das alignments across its checkpoints: the STEP file,
    and the same labelled step 0."""
    path = _das_alignments(t_name, m_name, run_dir)
    save_file(load_file(str(path)), str(path.parent / "alignments-0.safetensors"),
              metadata={"checkpoint": "0"})


def _atlas_table(t_name: str, m_name: str, run_dir) -> None:
    """`emergence` follows the cells of the run's atlas: its table and alignments at STEP."""
    table = run_dir / "analyses" / "atlas" / "atlas.parquet"
    if not table.exists():
        ctx, entry = _context(t_name, m_name, "atlas", run_dir)
        entry.obj(ctx)["atlas"].to_parquet(table)


PREPARE = {"subspaces": _das_at_two_checkpoints,  # what an analysis reads of another's output
           "emergence": _atlas_table}


@pytest.fixture(scope="module", autouse=True)
def _pyvene_imported():
    """pyvene's import (seconds, and tensors of its own) happens once, before any check."""
    from study.models.sites.pyvene_loader import pyvene
    pyvene()


def _checked(what: str, fn):
    """fn() inside the check, which must make no tensor without a device; a failure names
    the places that made one (where a `meta` tensor fails depends on what it meets:
    "not on the expected device", "cannot copy out of meta", "can't convert ... to numpy")."""
    with implicit_device_on_meta() as made:
        try:
            out = fn()
        except Exception as e:
            if not made:
                raise
            pytest.fail(f"{what}: {type(e).__name__}: {e}\ntensors made without a device: "
                        f"{sorted(set(made))}")
    assert made == [], f"{what}: tensors made without a device: {sorted(set(made))}"
    return out


@pytest.mark.parametrize("layout,m_name,a_name", _cases())
def test_an_analysis_makes_every_tensor_on_the_device_of_its_network(
        layout, m_name, a_name, tmp_path_factory):
    t_name = _task_or_skip(layout)
    run_dir = _run_dir(tmp_path_factory, t_name, m_name)
    if a_name in PREPARE:
        PREPARE[a_name](t_name, m_name, run_dir)
    ctx, entry = _context(t_name, m_name, a_name, run_dir)
    tables = _checked(f"{a_name} on {m_name} ({t_name})", lambda: entry.obj(ctx))
    # every table it writes is a declared one, with exactly its declared columns
    check_outputs(a_name, tables)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_comparison_across_runs_makes_every_tensor_on_the_device_of_its_networks(
        layout, tmp_path_factory):
    """`study compare`: every model family's das alignments on one task, compared pairwise
    (similarity, stitching, value geometry)."""
    from study.analyses.compare import CompareConfig, Subject, compare

    t_name = _task_or_skip(layout)
    subjects = []
    for m_name in project_entries("model"):
        run_dir = _run_dir(tmp_path_factory, t_name, m_name)
        path = _das_alignments(t_name, m_name, run_dir)
        task, model, _ = frozen_smoke_model(t_name, m_name)  # the network das ran on
        subjects.append(Subject(str(run_dir), m_name, STEP, model, path))
    cfg = CompareConfig(k=(2,), n_fit=32, n_test=32, n_geometry=16, n_perm=1)  # one of das' k
    tables = _checked(f"compare on {t_name}",
                      lambda: compare(subjects, task, cfg, torch.device("cpu")))
    check_outputs("compare", tables)
    n = len(subjects)
    assert len(tables["compare_similarity"]) == 2 * n * n  # cka and procrustes, every pair
    assert len(tables["compare_stitching"]) == n * n
