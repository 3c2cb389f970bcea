"""Rotary pre-LN transformers: `gpt12` (binding study) and `rope2` (counting study).

Both are the network in `study/models/nets/rotary.py`; they differ only in their paper defaults.

`gpt12` [paper, Wu et al. 2025 §"Experiment setup"]: "architecturally similar to GPT-2, with
37.8M parameters": 12 layers, 8 heads of dim 64, residual 512, MLP 2048, LayerNorm before
attention and MLP, rotary position embeddings, GELU, dropout 0.1, untied input and output
embeddings. [ours] GPT-2's biases on every linear map and LayerNorm, a final LayerNorm, no
bias on the unembedding, exact (erf) GELU, rotary over the full head dim with base 10000.
With the ~42-token binding vocabulary this is 37.87M parameters.

`rope2` [paper, Grant et al. 2025]: "two layers using Rotary positional encodings", pre-norm,
GELU, one head, d 128, MLP 512 (4 × d), dropout 0.5 (the study's dropout for its models).
[ours] the same block as `gpt12` (biases, final LayerNorm, untied unembedding); the authors'
code builds its transformers from a Hugging Face base whose details the paper does not state.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import MAX_WIDTH, fixed, setting

_ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
_CAPABILITIES = ("attention", "heads", "residual")




@dataclass(frozen=True)
class RotaryConfig:
    """Sizes of a pre-LN rotary transformer; defaults are `gpt12`'s paper values."""

    n_layers: int = setting(12, "transformer layers")
    n_heads: int = setting(8, "attention heads per layer")
    d_head: int = setting(64, "width of one head (even: rotary rotates pairs)")
    d_model: int = setting(512, "residual stream width")
    d_mlp: int = setting(2048, "MLP hidden width")
    dropout: float = setting(0.1, "dropout on attention, MLP and embeddings, in [0, 1)")
    activation: str = setting("gelu", "gelu | gelu_tanh | relu")
    rotary_base: float = setting(10000.0, "base of the rotary frequencies (> 1)")
    init_std: float = fixed(0.02, "std of every weight at initialisation, GPT-2's [ours]")
    embed_std: float = setting(
        0.0, "std of the token embedding at initialisation (0: init_std, GPT-2's) [ours]; "
        "small widths learn binding's lookup only from a larger one, e.g. 1")

    def __post_init__(self):
        for name in ("n_layers", "n_heads", "d_head", "d_model", "d_mlp"):
            if not 1 <= getattr(self, name) <= MAX_WIDTH:
                raise UsageError(f"model.{name}={getattr(self, name)} must be in 1..{MAX_WIDTH}")
        if self.d_head % 2:
            raise UsageError(f"model.d_head={self.d_head} must be even (rotary rotates pairs)")
        if not 0 <= self.dropout < 1:
            raise UsageError(f"model.dropout={self.dropout} must be in [0, 1)")
        if self.activation not in _ACTIVATIONS:
            raise UsageError(f"model.activation={self.activation!r} must be one of "
                             f"{', '.join(_ACTIVATIONS)}")
        if self.rotary_base <= 1:
            raise UsageError(f"model.rotary_base={self.rotary_base} must be greater than 1")
        if self.embed_std < 0:
            raise UsageError(f"model.embed_std={self.embed_std} must be 0 (init_std) or "
                             f"positive")

    def param_count(self, vocab_size: int, seq_len: int) -> int:
        """Trainable parameters of the built network (rotary adds none, so seq_len is unused)."""
        d, m, inner = self.d_model, self.d_mlp, self.n_heads * self.d_head
        per_layer = (2 * d  # LN before attention
                     + d * 3 * inner + 3 * inner  # fused QKV
                     + inner * d + d  # output projection
                     + 2 * d  # LN before MLP
                     + d * m + m + m * d + d)  # MLP
        return vocab_size * d + self.n_layers * per_layer + 2 * d + d * vocab_size


@dataclass(frozen=True)
class Rope2Config(RotaryConfig):
    """`rope2`: the same fields, with the counting study's transformer as defaults."""

    n_layers: int = 2
    n_heads: int = 1
    d_head: int = 128
    d_model: int = 128
    d_mlp: int = 512
    dropout: float = 0.5


def _build(config: RotaryConfig, vocab_size: int, seq_len: int):
    from study.models.nets.rotary import RotaryTransformer
    return RotaryTransformer(config, vocab_size, seq_len)


@register("model", "gpt12", config=RotaryConfig, capabilities=_CAPABILITIES, presets={
    # [ours] the laptop size: one layer per step of a two-hop lookup (a layer attaches each
    # line's letter to its right-hand side, one more per hop), width 64, no dropout, and an
    # N(0, 1) embedding, without which this width stays on binding's plateau
    # (docs/tasks/binding.md, "The laptop variant")
    "small": {"n_layers": 3, "n_heads": 4, "d_head": 32, "d_model": 64, "d_mlp": 256,
              "dropout": 0.0, "embed_std": 1.0},
    "smoke": {"n_layers": 2, "n_heads": 2, "d_head": 16, "d_model": 32, "d_mlp": 64},
})
def build_gpt12(config: RotaryConfig, vocab_size: int, seq_len: int):
    """GPT-2-like rotary transformer of the binding study (12 layers, 8 heads, 37.8M params)."""
    return _build(config, vocab_size, seq_len)


@register("model", "rope2", config=Rope2Config, capabilities=_CAPABILITIES, presets={
    # [ours] half the width: the paper's d 128 trains at ~1 step/s on one CPU core; no
    # dropout: with the paper's 0.5 the small model sat at 0.73 test / 0.54 held-out after 600
    # steps (lr 1e-3), without it it is perfect on both by step 150
    "small": {"d_model": 64, "d_head": 64, "d_mlp": 256, "dropout": 0.0},
    "smoke": {"d_head": 32, "d_model": 32, "d_mlp": 64},
})
def build_rope2(config: RotaryConfig, vocab_size: int, seq_len: int):
    """Two-layer one-head rotary transformer of the counting study (d 128, MLP 512)."""
    return _build(config, vocab_size, seq_len)

