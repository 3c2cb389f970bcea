"""`task=assign_add model=attn2 scale=paper` trains as the authors' code does (Exoo et al. 2026,
`bexoo/assign-and-add` train.py, transcribed in tools/authors_loop/authors_train.py).

Fast: the optimiser, the schedule, the loss and the network read off the objects a
`scale=paper` run builds, against the authors' settings; the training sequences of both
samplers, compared statistic by statistic on a few thousand draws. Slow: the two training loops update
for update (tools/authors_loop/compare_assign_add.py); it needs TransformerLens before 4.0
(the authors' HookedTransformer), which the project does not depend on, and skips without it.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from study.run.config import resolve
from study.core import registry
from study.train.engine import Engine
from study.train.runtime import resolve_runtime
from study.train.schedule import lr_at

TOOL = Path(__file__).resolve().parent.parent / "tools" / "authors_loop"


def _load(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TOOL / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


A = _load("authors_train")


@pytest.fixture(scope="module")
def paper():
    cfg = resolve({"task": "assign_add", "model": "attn2", "scale": "paper", "train.device": "cpu"})
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    torch.manual_seed(0)
    model = registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab), task.seq_len)
    engine = Engine(model, cfg.train, resolve_runtime(cfg.train), task.output_ids, len(task.vocab))
    return cfg, task, model, engine


def test_paper_optimiser_and_schedule_are_the_authors(paper):
    cfg, task, model, engine = paper
    tc = cfg.train
    authors = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=A.LR,
                                weight_decay=A.WD, betas=A.BETAS)  # train.py's call
    for key in ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"):
        assert engine.optimizer.defaults[key] == authors.defaults[key], key
    # one group: every weight trained and decayed, as AdamW over the authors' trainable ones
    (group,) = engine.optimizer.param_groups
    assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}
    assert {lr_at(tc, s) for s in range(tc.steps)} == {A.LR}  # no warm-up, no decay
    assert tc.grad_clip == 0  # train.py does not clip
    assert (tc.batch_size, tc.steps) == (A.BATCH_SIZE, A.RELEASED_STEPS)
    # the loss: the last position only, over the MOD number logits (logits[:, -1, :MOD])
    labels = task.train_batch(0, 64).labels
    assert tc.loss_on == "answer" and (labels[:, :-1] == -1).all() and (labels[:, -1] >= 0).all()
    assert tuple(task.output_ids) == tuple(range(A.MOD))
    assert [s.replace("<PAD>", "PAD") for s in A.TOKEN_STRINGS[:A.VOCAB]] == list(task.vocab)


def test_paper_attn2_is_the_authors_network(paper):
    """Every authors' trained weight has its counterpart of the same shape; nothing else is
    trained but the unembedding's non-number columns (the one known difference)."""
    cfg, task, model, _ = paper
    d, h = A.D_MODEL, A.N_HEADS
    authors = {"W_E": (A.VOCAB, d), "W_pos": (A.SEQ_LEN, d), "W_U": (d, A.MOD)}
    for layer in range(A.N_LAYERS):
        for w in ("W_Q", "W_K", "W_V"):
            authors[f"blocks.{layer}.attn.{w}"] = (h, d, d // h)
        authors[f"blocks.{layer}.attn.W_O"] = (h, d // h, d)
    # train.py zeroes and freezes the layer-0 MLP and every bias (REMOVE_LAYER_0_MLP,
    # freeze_biases): the layer-1 MLP's weights are the only MLP weights trained
    authors["blocks.1.mlp.W_in"], authors["blocks.1.mlp.W_out"] = (d, 4 * d), (4 * d, d)
    ours = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert set(ours) == set(authors)
    assert {n: s for n, s in ours.items() if n != "W_U"} == \
        {n: s for n, s in authors.items() if n != "W_U"}
    assert ours["W_U"] == (d, len(task.vocab))
    n_authors = sum(math.prod(s) for s in authors.values())
    assert n_authors == 281_216
    extra = (len(task.vocab) - A.MOD) * d
    assert cfg.model_config.param_count(len(task.vocab), task.seq_len) - extra == n_authors
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    # TransformerLens' default init: every weight N(0, 0.8 / sqrt(d_model))
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert abs(flat.std().item() / (0.8 / math.sqrt(d)) - 1) < 0.01
    assert abs(flat.mean().item()) < 1e-3


def test_the_authors_sampler_and_ours_draw_the_same_sequences(paper):
    """4,096 training sequences from the authors' sampler (transcribed) and from ours: every
    statistic of the comparison (forms, assignment counts, operand variables and values,
    answers, gaps, ...) agrees by a chi-square test, and neither draws a held-out pair, a
    variable in a restricted position or a variable assigned twice. No TransformerLens needed."""
    _, task, _, _ = paper
    rows, theirs, ours, ok = _load("compare_assign_add").compare_data(task, 4096, A.build_sequence)
    assert ok, [r for r in rows if r[3] != "same"] or (theirs, ours)
    assert len(rows) >= 8  # every statistic was compared


def _hooked_transformer_or_skip():
    tl = pytest.importorskip(
        "transformer_lens",
        reason="the authors' loop needs transformer_lens (< 4.0), which the project does not "
        "install: see tools/authors_loop/README.md")
    try:
        tl.HookedTransformer
    except (AttributeError, ImportError):
        pytest.skip(f"transformer_lens {getattr(tl, '__version__', '?')} has no "
                    "HookedTransformer (removed in 4.0); install transformer_lens<4")


@pytest.mark.slow
def test_authors_loop_and_ours_update_alike():
    """Same batches, same initial weights: float64 losses and weights equal to rounding, float32
    losses within the float32 noise; data statistics and settings agree."""
    _hooked_transformer_or_skip()
    compare = _load("compare_assign_add").compare
    result = compare(steps=50, data_samples=8192, out=lambda *a: None)
    assert result["settings_ok"], [r for r in result["settings"] if r[3] == "DIFFERS"]
    assert result["float64_ok"] and max(result["weights64"].values()) < 1e-9
    assert result["float32_ok"] and result["data_ok"] and result["extra_columns_ok"]
