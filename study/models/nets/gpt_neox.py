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

Attention is computed the "eager" way by default (the same logits), so that
`output_attentions=True` returns the patterns, as TransformerLens and attention-pattern code
ask: transformers' default, sdpa, returns none (with a warning) when asked for them. The
choice is written into config.json (`attn_implementation`), so a model loaded back with
`from_pretrained` computes attention the same way unless the loader passes another
`attn_implementation`. `attn_implementation="sdpa"` exports the fused kernel instead.

Special tokens [ours]: GPT-NeoX's config defaults (bos 0, eos 2) are ordinary task tokens
here (0 is PAD; 2 is counting's E, binding's `b`, assign_add's `2`), so the config's
pad/bos/eos ids are set from the task's tokenizer (`study/models/tokenizer.py`) or left
None: pad is the task's PAD, bos/eos the task's own delimiters where it has them.

Quiet: the instance's `save_pretrained` runs without transformers' progress bars and
warnings (`study/models/quiet.py`) and writes the tokenizer given to `to_gpt_neox` beside the
weights, so `AutoTokenizer.from_pretrained(dir)` and `AutoModelForCausalLM.from_pretrained(dir)`
load the pair; the files are transformers' own.
"""
from __future__ import annotations

import types

import torch

from study.models.nets.rotary import RotaryTransformer
from study.models.quiet import quiet
from study.core.errors import UsageError

# our activation names -> transformers' ACT2FN names
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
# attention implementations a CPU or any GPU runs (flash kernels need their own packages)
ATTENTION = ("eager", "sdpa")


def gpt_neox_config(model: RotaryTransformer, *, pad_token_id: int | None = None,
                    bos_token_id: int | None = None, eos_token_id: int | None = None,
                    attn_implementation: str = "eager"):
    """The `GPTNeoXConfig` of one of our rotary transformers, with the given special-token
    ids (None: no such token, never GPT-NeoX's defaults) and attention implementation."""
    from transformers import GPTNeoXConfig

    cfg = model.config
    config = GPTNeoXConfig(
        vocab_size=model.vocab_size, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads, intermediate_size=cfg.d_mlp,
        hidden_act=HF_ACTIVATIONS[cfg.activation], rotary_pct=1.0,
        rotary_emb_base=cfg.rotary_base, max_position_embeddings=model.seq_len,
        use_parallel_residual=False, attention_bias=True, layer_norm_eps=1e-5,
        hidden_dropout=cfg.dropout, attention_dropout=cfg.dropout, tie_word_embeddings=False,
        initializer_range=cfg.init_std, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
        eos_token_id=eos_token_id, attn_implementation=attn_implementation)
    config.attn_implementation = attn_implementation  # a plain attribute: config.json keeps it
    return config


@torch.no_grad()
def to_gpt_neox(model, tokenizer=None, attn_implementation: str = "eager"):
    """A `GPTNeoXForCausalLM` (eval mode, float32, on the CPU) with `model`'s weights; its
    special-token ids are `tokenizer`'s (a `study.models.tokenizer.task_tokenizer`), and its
    `save_pretrained` writes `tokenizer` too."""
    from transformers import GPTNeoXForCausalLM

    if attn_implementation not in ATTENTION:
        raise UsageError(f"to_transformers: attn_implementation={attn_implementation!r}; "
                         f"choose from {', '.join(ATTENTION)}")
    if not isinstance(model, RotaryTransformer):
        raise UsageError(f"to_transformers: {type(model).__name__} has no GPT-NeoX equivalent; "
                         f"the rotary transformers (gpt12, rope2) do")
    cfg = model.config
    if cfg.d_head * cfg.n_heads != cfg.d_model:
        raise UsageError(f"to_transformers: GPT-NeoX needs n_heads * d_head = d_model; this "
                         f"model has {cfg.n_heads} x {cfg.d_head} != {cfg.d_model}")
    ids = {f"{role}_token_id": getattr(tokenizer, f"{role}_token_id", None)
           for role in ("pad", "bos", "eos")}
    with quiet(("transformers",)):
        ref = GPTNeoXForCausalLM(gpt_neox_config(model, attn_implementation=attn_implementation,
                                                 **ids)).eval()
    ref.study_tokenizer = tokenizer
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


def _quiet_save_pretrained(self, save_directory, *args, **kwargs):
    """transformers' own `save_pretrained`, without its progress bars and warnings, and the
    tokenizer's beside it."""
    with quiet(("transformers",)):
        out = type(self).save_pretrained(self, save_directory, *args, **kwargs)
        if self.study_tokenizer is not None:
            self.study_tokenizer.save_pretrained(save_directory)
    return out
