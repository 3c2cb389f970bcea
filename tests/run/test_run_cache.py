"""`Run.cache`: every site of a trained network by name, with the documented shapes, equal to
what patching and DAS read there (`gather_site`, through the one capture path), attention
patterns that are distributions over earlier keys, and one-line errors naming what is
allowed."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import study
from study.core.errors import UsageError
from study.models.sites.cache import run_with_cache
from study.models.sites.capture import gather_site, site_widths
from tests.conftest import frozen_smoke_model


def expected_shapes(net, batch: int, pos: int) -> dict[str, tuple]:
    """The shape `Run.cache` documents for every site of `net`."""
    widths = site_widths(net)
    shapes = {}
    for kind, count in net.sites.kinds().items():
        if kind == "state":
            shapes["state"] = (batch, pos, widths["state"])
            continue
        for layer in range(count):
            shapes[f"{kind}[{layer}]"] = (batch, pos, widths[kind])
    if "attention" in net.capabilities:
        for layer in range(net.n_layers):
            shapes[f"pattern[{layer}]"] = (batch, net.n_heads, pos, pos)
    return shapes


@pytest.mark.parametrize("model", ["rope2", "gru"])
def test_every_site_has_its_documented_shape_and_is_what_patching_reads(trained_runs, model):
    run = study.open_run(trained_runs(model))
    ids = torch.as_tensor(run.task.split("test").ids[:6]).long()  # (6, pos)
    logits, acts = run.cache(ids)
    net = run.model()
    assert set(acts) == set(expected_shapes(net, *ids.shape))
    for name, shape in expected_shapes(net, *ids.shape).items():
        assert tuple(acts[name].shape) == shape, name
    torch.testing.assert_close(logits, net(ids), atol=1e-5, rtol=1e-5)
    pos = torch.as_tensor(np.random.default_rng(0).integers(0, ids.shape[1], len(ids)))
    rows = torch.arange(len(ids))
    for name in acts:
        if name.startswith("pattern"):
            continue
        kind, _, rest = name.partition("[")
        layer = int(rest.rstrip("]")) if rest else 0
        read = gather_site(net, ids, kind, layer, pos)  # what patching and DAS read
        torch.testing.assert_close(acts[name][rows, pos], read, atol=1e-5, rtol=1e-5)


def test_attention_patterns_are_causal_distributions_over_keys(trained_runs):
    run = study.open_run(trained_runs("rope2"))
    _, acts = run.cache(["B D0 D1 D2 T R R R E", "B D1 T R E"], sites=["pattern[0]",
                                                                       "pattern[1]"])
    assert sorted(acts) == ["pattern[0]", "pattern[1]"]
    for pattern in acts.values():
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))
        assert (pattern >= 0).all() and (pattern.triu(1) == 0).all()
        assert (pattern.tril(-1) > 0).any()  # attends to earlier keys, not only to itself


def test_prompts_are_the_tasks_tokens_right_padded_with_pad(trained_runs):
    run = study.open_run(trained_runs("rope2"))
    long, short = "B D0 D1 T R R E", "B D2 T R E"
    both, acts = run.cache([long, short.split()], sites=["resid[2]", "resid[0]"])
    pad_embedding = run.model().embed.weight[run.task.pad_id]  # resid[0] is the embedding
    torch.testing.assert_close(acts["resid[0]"][1, 5:], pad_embedding.expand(2, -1))
    alone, alone_acts = run.cache(short, sites="resid[2]")
    torch.testing.assert_close(both[1, :5], alone[0], atol=1e-5, rtol=1e-5)  # causal: PAD unseen
    torch.testing.assert_close(acts["resid[2]"][1, :5], alone_acts["resid[2]"][0],
                               atol=1e-5, rtol=1e-5)
    ids, _ = run.cache(torch.tensor([run.task.encode(long.split())]), sites="resid[0]")
    torch.testing.assert_close(ids, both[:1], atol=1e-5, rtol=1e-5)


def test_attn2_leaves_out_the_site_its_forward_never_computes():
    task, net, _ = frozen_smoke_model("counting", "attn2")
    ids = torch.as_tensor(task.split("test").ids[:3]).long()
    _, acts = run_with_cache(net, ids)
    d_model = site_widths(net)["mlp_out"]
    assert "mlp_out[0]" not in acts and acts["mlp_out[1]"].shape == (3, ids.shape[1], d_model)
    assert acts["pattern[1]"].shape == (3, net.n_heads, ids.shape[1], ids.shape[1])
    with pytest.raises(UsageError, match="never computes mlp_out\\[0\\]"):
        run_with_cache(net, ids, ["mlp_out[0]"])


def test_a_bad_site_token_or_id_is_one_line_naming_what_is_allowed(trained_runs):
    run = study.open_run(trained_runs("gru"))
    cases = [
        (dict(inputs="B D0 X T"), "token 'X' is not in the vocabulary; tokens"),
        (dict(inputs="B D0 T", sites="resid[0]"), "sites: state"),
        (dict(inputs="B D0 T", sites=[]), "no sites are"),
        (dict(inputs=torch.tensor([[1, 4, 10]])), "ids are 0..9"),
        (dict(inputs=torch.tensor([[1.0, 4.0]])), "must be integer (batch, pos)"),
        (dict(inputs=[]), "no prompts"),
        (dict(inputs=["B D0 T", "  "]), "an empty prompt"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(UsageError) as e:
            run.cache(**kwargs)
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert "PAD, B, E, T, D0" in str(pytest.raises(UsageError, run.cache, "Q").value)
