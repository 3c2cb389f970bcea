"""The rotary transformers (`gpt12`, `rope2`) as a `transformers.GPTNeoXForCausalLM`.

`study/models/nets/rotary.py` is GPT-NeoX's architecture with a sequential residual: pre-LN blocks,
rotary embeddings on the full head dimension in the "rotate half" layout, biased linear
layers, an untied unembedding without bias. `to_gpt_neox(model)` copies the weights into
Hugging Face's class, whose logits then equal ours (tested on random and on trained weights),
so a trained network can be taken to TransformerLens, nnsight or anything that reads
`transformers` models; `save_pretrained` writes it without any network access.

The one layout difference: our fused QKV projection stacks [q of every head | k of every
head | v of every head]; GPT-NeoX stacks per head [q | k | v]. Dropout is carried over as
configured (GPT-NeoX's `hidden_dropout` sits after the embedding and each block output, like
ours); the exported model is in eval mode.

Quiet by default: the model computes attention the "eager" way (the same logits; transformers'
default, sdpa, warns and falls back whenever a tool asks for `output_attentions`, as
TransformerLens and attention-pattern code do), and the instance's `save_pretrained` runs
without transformers' progress bars and warnings (`study/models/quiet.py`); the files it
writes are transformers' own.
"""
from __future__ import annotations

import types

import torch

from study.models.nets.rotary import RotaryTransformer
from study.models.quiet import quiet
from study.core.errors import UsageError

# our activation names -> transformers' ACT2FN names
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}


def gpt_neox_config(model: RotaryTransformer):
    """The `GPTNeoXConfig` of one of our rotary transformers."""
    from transformers import GPTNeoXConfig

    cfg = model.config
    return GPTNeoXConfig(
        vocab_size=model.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_mlp,
        hidden_act=HF_ACTIVATIONS[cfg.activation], rotary_pct=1.0,
        rotary_emb_base=cfg.rotary_base, max_position_embeddings=model.seq_len,
        use_parallel_residual=False, attention_bias=True, layer_norm_eps=1e-5,
        hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout, tie_word_embeddings=False,
        initializer_range=cfg.init_std, attn_implementation="eager")


@torch.no_grad()
def to_gpt_neox(model):
    """A `GPTNeoXForCausalLM` (eval mode, float32, on the CPU) with `model`'s weights."""
    from transformers import GPTNeoXForCausalLM

    if not isinstance(model, RotaryTransformer):
        raise UsageError(f"to_transformers: {type(model).__name__} has no GPT-NeoX equivalent; "
                         f"the rotary transformers (gpt12, rope2) do")
    cfg = model.config
    if cfg.d_head * cfg.n_heads != cfg.d_model:
        raise UsageError(f"to_transformers: GPT-NeoX needs n_heads * d_head = d_model; this "
                         f"model has {cfg.n_heads} x {cfg.d_head} != {cfg.d_model}")
    with quiet(("transformers",)):
        ref = GPTNeoXForCausalLM(gpt_neox_config(model)).eval()
    ref.save_pretrained = types.MethodType(_quiet_save_pretrained, ref)
    H, dh = cfg.n_heads, cfg.d_head

    def neox_qkv(t):  # ours: [q heads | k heads | v heads]; NeoX: per head [q | k | v]
        return t.reshape(3, H, dh, *t.shape[1:]).transpose(0, 1).reshape(t.shape)

    ours = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    base = ref.gpt_neox
    base.embed_in.weight.copy_(ours["embed.weight"])
    for i, layer in enumerate(base.layers):
        p = f"blocks.{i}."
        for src, dst in (("ln1", layer.input_layernorm), ("ln2", layer.post_attention_layernorm),
                         ("attn.proj", layer.attention.dense), ("up", layer.mlp.dense_h_to_4h),
                         ("down", layer.mlp.dense_4h_to_h)):
            dst.weight.copy_(ours[p + src + ".weight"])
            dst.bias.copy_(ours[p + src + ".bias"])
        layer.attention.query_key_value.weight.copy_(neox_qkv(ours[p + "attn.qkv.weight"]))
        layer.attention.query_key_value.bias.copy_(neox_qkv(ours[p + "attn.qkv.bias"]))
    base.final_layer_norm.weight.copy_(ours["ln_f.weight"])
    base.final_layer_norm.bias.copy_(ours["ln_f.bias"])
    ref.get_output_embeddings().weight.copy_(ours["unembed.weight"])
    return ref


def _quiet_save_pretrained(self, *args, **kwargs):
    """transformers' own `save_pretrained`, without its progress bars and warnings."""
    with quiet(("transformers",)):
        return type(self).save_pretrained(self, *args, **kwargs)
