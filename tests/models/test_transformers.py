"""The transformer families (gpt12, rope2, attn2): reference equivalence, sizes, sites, attention
capture and pyvene addressing."""
from __future__ import annotations

import math

import pytest
import torch

from study.models.base import build_model
from study.models.nets.attention import capture_attention
from study.core.registry import SCALES, get
from tests.conftest import project_entries

FAMILIES = [n for n, e in project_entries("model").items() if "attention" in e.capabilities]
VOCAB, SEQ = 23, 12


def smoke_model(name: str, vocab: int = VOCAB, seq_len: int = SEQ, **overrides):
    entry = get("model", name)
    torch.manual_seed(0)
    model = build_model(entry, entry.make_config("smoke", overrides), vocab, seq_len)
    return model.eval()


def random_ids(batch: int = 3, n_pos: int = SEQ, vocab: int = VOCAB, seed: int = 1):
    return torch.randint(0, vocab, (batch, n_pos), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def randomise(model: torch.nn.Module, std: float = 0.2) -> None:
    """Non-default values everywhere (biases and LayerNorm too), so a mapping error shows."""
    torch.manual_seed(2)
    for p in model.parameters():
        p.normal_(0.0, std)
    for name, p in model.named_parameters():
        if "ln" in name and name.endswith("weight"):
            p.add_(1.0)


# ----------------------------------------------------------------------------- references

@pytest.mark.parametrize("name,overrides", [("gpt12", {}), ("rope2", {}),
                                            ("rope2", {"rotary_base": 500.0,
                                                       "activation": "gelu_tanh"})])
@torch.no_grad()
def test_rotary_exports_to_gpt_neox_with_equal_logits(name, overrides):
    """`to_gpt_neox` is the public export; random weights everywhere (biases, LayerNorms)
    and a non-default rotary base and activation, so a mapping error shows."""
    from study.models.nets.gpt_neox import to_gpt_neox

    ours = smoke_model(name, **overrides)
    randomise(ours)
    ref = to_gpt_neox(ours)
    ids = random_ids()
    expected = ref(input_ids=ids).logits
    assert expected.abs().max() > 0.1  # a meaningful comparison, not two near-zero tensors
    torch.testing.assert_close(ours(ids), expected, atol=1e-5, rtol=1e-5)
    with capture_attention(ours):
        torch.testing.assert_close(ours(ids), expected, atol=1e-5, rtol=1e-5)


def test_only_rotary_transformers_export_to_gpt_neox():
    from study.models.nets.gpt_neox import to_gpt_neox
    from study.core.errors import UsageError

    with pytest.raises(UsageError, match="no GPT-NeoX equivalent"):
        to_gpt_neox(smoke_model("attn2"))
    with pytest.raises(UsageError, match="n_heads \\* d_head = d_model"):
        to_gpt_neox(smoke_model("rope2", d_head=8))


def attn2_reference(model, ids):
    """The assign-and-add forward written out from the weights, one head at a time."""
    x = model.W_E[ids] + model.W_pos[: ids.shape[1]]
    n_pos = ids.shape[1]
    causal = torch.tril(torch.ones(n_pos, n_pos, dtype=torch.bool))
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        out = torch.zeros_like(x)
        for h in range(attn.n_heads):
            q, k, v = x @ attn.W_Q[h], x @ attn.W_K[h], x @ attn.W_V[h]
            scores = (q @ k.transpose(1, 2)) / math.sqrt(attn.d_head)
            probs = torch.softmax(scores.masked_fill(~causal, -1e30), dim=-1)
            out = out + (probs @ v) @ attn.W_O[h]
        x = x + out
        if layer in model.mlp_layers:
            x = x + torch.relu(x @ block.mlp.W_in) @ block.mlp.W_out
    return x @ model.W_U


@pytest.mark.parametrize("n_heads", [1, 2])
@torch.no_grad()
def test_attn2_matches_plain_reference(n_heads):
    model = smoke_model("attn2", n_heads=n_heads, d_head=16)
    randomise(model)
    ids = random_ids()
    torch.testing.assert_close(model(ids), attn2_reference(model, ids), atol=1e-5, rtol=1e-5)


def test_attn2_architecture_is_the_papers():
    model = smoke_model("attn2")
    names = dict(model.named_parameters())
    assert not any("bias" in n or "ln" in n for n in names)  # no biases, no normalisation
    assert model.blocks[0].mlp is None and model.blocks[1].mlp is not None  # last-layer MLP
    assert model.mlp_layers == (1,)
    d = model.config.d_model
    assert names["W_E"].shape == (VOCAB, d) and names["W_pos"].shape == (SEQ, d)
    assert names["W_U"].shape == (d, VOCAB)
    assert names["blocks.0.attn.W_Q"].shape == (1, d, model.config.d_head)
    assert names["blocks.0.attn.W_O"].shape == (1, model.config.d_head, d)


# ----------------------------------------------------------------------------- sizes

def test_gpt12_paper_size():
    entry = get("model", "gpt12")
    config = entry.make_config("paper")
    assert (config.n_layers, config.n_heads, config.d_head, config.d_model, config.d_mlp) == (
        12, 8, 64, 512, 2048)
    n = config.param_count(42, 70)  # the binding vocabulary is about 42 tokens
    assert abs(n - 37.8e6) <= 0.01 * 37.8e6


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("scale", SCALES)
def test_param_count_is_exact(name, scale):
    entry = get("model", name)
    config = entry.make_config(scale)
    sizes = ((42, 70),) if scale == "paper" else ((7, 9), (42, 70), (74, 16))  # paper: 38M
    for vocab, seq_len in sizes:
        model = build_model(entry, config, vocab, seq_len)
        assert config.param_count(vocab, seq_len) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["gpt12", "rope2"])
def test_the_embedding_is_drawn_at_embed_std_and_every_other_weight_at_init_std(name):
    from study.core.errors import UsageError
    entry = get("model", name)
    sizes = {"n_layers": "1", "d_model": "256", "d_mlp": "256", "d_head": "16", "n_heads": "2"}
    for overrides, embed in (({}, 0.02), ({"embed_std": "1"}, 1.0)):
        torch.manual_seed(0)
        config = entry.make_config("paper", {**sizes, **overrides})
        model = build_model(entry, config, 400, 16)
        assert model.embed.weight.std().item() == pytest.approx(embed, rel=0.03)
        assert model.blocks[0].up.weight.std().item() == pytest.approx(0.02, rel=0.03)
    with pytest.raises(UsageError, match="model.embed_std=-1"):
        entry.make_config("small", {"embed_std": "-1"})
    if name == "gpt12":  # the laptop size learns binding's lookup only from N(0, 1)
        assert get("model", "gpt12").make_config("small").embed_std == 1.0


def test_attn2s_embed_std_redraws_its_embedding_alone():
    """attn2's `embed_std`: 0 keeps the authors' N(0, 0.8/sqrt(d)) everywhere; otherwise only
    W_E is drawn again, every other tensor of the seed stays as it was."""
    from study.core.errors import UsageError
    entry = get("model", "attn2")
    nets = []
    for overrides in ({}, {"embed_std": "1"}):
        torch.manual_seed(0)
        nets.append(build_model(entry, entry.make_config("paper", overrides), 400, 16))
    plain, wide = (dict(n.named_parameters()) for n in nets)
    assert plain["W_E"].std().item() == pytest.approx(0.8 / 128 ** 0.5, rel=0.03)
    assert wide["W_E"].std().item() == pytest.approx(1.0, rel=0.03)
    assert all(torch.equal(plain[k], wide[k]) for k in plain if k != "W_E")
    with pytest.raises(UsageError, match="model.embed_std=-1"):
        entry.make_config("small", {"embed_std": "-1"})


def test_rope2_defaults_differ_from_gpt12():
    config = get("model", "rope2").make_config("paper")
    assert (config.n_layers, config.n_heads, config.d_head, config.d_model, config.d_mlp,
            config.dropout) == (2, 1, 128, 128, 512, 0.5)


# ----------------------------------------------------------------------------- sites

def site_modules(model):
    for kind, modules in model.sites.named_children():
        for index, module in enumerate(modules):
            yield kind, index, module


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_sites_have_documented_shapes(name):
    model = smoke_model(name)
    cfg, L = model.config, model.config.n_layers
    assert model.sites.kinds() == {"resid": L + 1, "attn_out": L, "mlp_out": L, "head": L}
    seen = {}
    handles = [module.register_forward_hook(
        lambda m, i, o, key=(kind, index): seen.__setitem__(key, tuple(o.shape)))
        for kind, index, module in site_modules(model)]
    model(random_ids(batch=2, n_pos=5))
    for h in handles:
        h.remove()
    width = {"resid": cfg.d_model, "attn_out": cfg.d_model, "mlp_out": cfg.d_model,
             "head": cfg.n_heads * cfg.d_head}
    expected = {(kind, index): (2, 5, width[kind]) for kind, index, _ in site_modules(model)
                if kind != "mlp_out" or index in getattr(model, "mlp_layers", range(L))}
    assert seen == expected
    widths = {k.name: (k.count, k.width) for k in model.site_kinds()}
    assert widths == {kind: (len(mods), width[kind]) for kind, mods in model.sites.named_children()}


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_patching_a_site_with_itself_changes_nothing_and_respects_causality(name):
    model = smoke_model(name)
    base, other = random_ids(seed=1), random_ids(seed=2)
    clean = model(base)
    p = 5
    for kind, index, module in site_modules(model):
        cache = {}
        handle = module.register_forward_hook(lambda m, i, o: cache.__setitem__("act", o))
        model(base)
        handle.remove()
        if "act" not in cache:  # attn2's layer without an MLP: the site never runs
            continue
        own = cache["act"]
        handle = module.register_forward_hook(lambda m, i, o: o.index_copy(1, torch.tensor([p]),
                                                                            own[:, p:p + 1]))
        torch.testing.assert_close(model(base), clean, atol=0, rtol=0)
        handle.remove()

        noise = torch.randn_like(own[:, p:p + 1]) * 3
        handle = module.register_forward_hook(lambda m, i, o: o.index_add(
            1, torch.tensor([p]), noise))
        patched = model(other)
        handle.remove()
        reference = model(other)
        torch.testing.assert_close(patched[:, :p], reference[:, :p], atol=0, rtol=0)
        assert (patched[:, p] - reference[:, p]).abs().max() > 1e-4, (kind, index)


# ----------------------------------------------------------------------------- attention capture

@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_capture_attention_patterns(name):
    model = smoke_model(name)
    randomise(model)  # non-uniform patterns
    ids = random_ids()
    fused = model(ids)
    with capture_attention(model) as patterns:
        explicit = model(ids)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    cfg = model.config
    assert len(patterns) == cfg.n_layers
    future = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)
    for pattern in patterns:
        assert pattern.shape == (3, cfg.n_heads, SEQ, SEQ)
        assert torch.all(pattern[..., future] == 0)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(3, cfg.n_heads, SEQ))
    # the switch is undone, even when the block raises
    with pytest.raises(RuntimeError), capture_attention(model) as patterns:
        raise RuntimeError
    model(ids)
    assert all(getattr(m, "capture", None) is None for m in model.modules())


# ----------------------------------------------------------------------------- pyvene

def manual_interchange(model, site, base, source, p):
    """Source's activation at position p written into base's run by plain forward hooks."""
    cache = {}
    handle = site.register_forward_hook(lambda m, i, o: cache.__setitem__("src", o))
    model(source)
    handle.remove()
    handle = site.register_forward_hook(lambda m, i, o: o.index_copy(
        1, torch.tensor([p]), cache["src"][:, p:p + 1]))
    try:
        return model(base)
    finally:
        handle.remove()


@pytest.mark.parametrize("name", [n for n, e in project_entries("model").items()
                                  if "residual" in e.capabilities])
@pytest.mark.parametrize("route", ["module_path", "site_helpers"])
@torch.no_grad()
def test_pyvene_resid_interchange_equals_manual_hook(name, route):
    model = smoke_model(name)
    base, source = random_ids(seed=1), random_ids(seed=2)
    p, batch = 4, base.shape[0]
    manual = manual_interchange(model, model.sites.resid[1], base, source, p)
    clean = model(base)
    assert not torch.allclose(manual, clean)

    if route == "module_path":  # pyvene's fallback: a module path as the component
        from study.models.sites.pyvene_loader import pyvene
        pv = pyvene()
        rep = pv.RepresentationConfig(
            layer=1, component="sites.resid[1].output", unit="pos", max_number_of_units=1,
            intervention=pv.VanillaIntervention(embed_dim=model.config.d_model))
        iv = pv.IntervenableModel(pv.IntervenableConfig(representations=[rep]), model)
        where = [[[p]] * batch]  # per-example locations (a bare int switches on fast mode)

        def run(src):
            return iv({"ids": base}, [{"ids": src}], {"sources->base": (where, where)})[1]
    else:
        from study.models.sites.pyvene_bridge import module_intervenable
        from study.models.sites.pyvene_run import interchange_ids
        iv = module_intervenable(model, "resid", 1, "vanilla")

        def run(src):
            return interchange_ids(iv, base, src, base_pos=[[p]] * batch)

    torch.testing.assert_close(run(base), clean, atol=0, rtol=0)
    torch.testing.assert_close(run(source), manual, atol=1e-6, rtol=1e-6)


@torch.no_grad()
def test_rotary_runs_past_its_seq_len_and_attn2_refuses():
    model = smoke_model("gpt12")  # rotary tables cached for SEQ positions
    long = random_ids(n_pos=SEQ + 7)
    torch.testing.assert_close(model(long)[:, :SEQ], model(long[:, :SEQ]), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="learned positions"):
        smoke_model("attn2")(long)
