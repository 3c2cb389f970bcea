"""`attn2`: the assign-and-add study's two-layer, one-head transformer (Exoo et al. 2026).

[paper] 2 layers, 1 head, d_model 128, d_head 128, d_mlp 512, ReLU; no LayerNorm, no biases;
no MLP in the first layer; learned absolute positions; untied unembedding. [ours] The
unembedding covers the whole task vocabulary instead of only the 59 numbers; the task's
`output_ids` restrict loss and accuracy to the numbers as the authors score them (see
`study/models/nets/attn2.py`). The network lives in `study/models/nets/attn2.py`.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import MAX_WIDTH, setting




@dataclass(frozen=True)
class Attn2Config:
    n_layers: int = setting(2, "transformer layers [paper]")
    n_heads: int = setting(1, "attention heads per layer [paper]")
    d_model: int = setting(128, "residual stream width [paper]")
    d_head: int = setting(128, "width of one head's queries, keys and values [paper]")
    d_mlp: int = setting(512, "MLP hidden width [paper]")
    activation: str = setting("relu", "relu | gelu")
    mlp_last_only: bool = setting(
        True,
        "[paper] only the last layer has an MLP; False: every layer")
    init_scale: float = setting(
        0.8,
        "weights ~ N(0, init_scale / sqrt(d_model)), TransformerLens' default")
    embed_std: float = setting(
        0.0, "std of the token embedding W_E at initialisation (0: init_scale / sqrt(d_model), "
        "as every other weight) [ours]")

    def __post_init__(self):
        for name in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp"):
            if not 1 <= getattr(self, name) <= MAX_WIDTH:
                raise UsageError(f"model.{name}={getattr(self, name)} must be in 1..{MAX_WIDTH}")
        if self.activation not in ("relu", "gelu"):
            raise UsageError(f"model.activation={self.activation!r} must be one of relu, gelu")
        if self.init_scale <= 0:
            raise UsageError(f"model.init_scale={self.init_scale} must be positive")
        if not (self.embed_std >= 0 and self.embed_std < float("inf")):
            raise UsageError(f"model.embed_std={self.embed_std} must be 0 (init_scale's) or "
                             f"a positive number")

    def mlp_layers(self) -> tuple[int, ...]:
        """Indices of the layers that have an MLP."""
        return (self.n_layers - 1,) if self.mlp_last_only else tuple(range(self.n_layers))

    def param_count(self, vocab_size: int, seq_len: int) -> int:
        """Trainable parameters of the built network (learned positions: seq_len × d_model)."""
        d = self.d_model
        attn = 4 * self.n_heads * d * self.d_head  # W_Q, W_K, W_V, W_O
        mlp = 2 * d * self.d_mlp  # W_in, W_out
        return (vocab_size * d + seq_len * d + self.n_layers * attn
                + len(self.mlp_layers()) * mlp + d * vocab_size)


@register("model", "attn2", config=Attn2Config,
          capabilities=("attention", "heads", "residual", "weights_view", "learned_positions"),
          # small is the paper's model (the defaults), which trains in minutes on a CPU
          presets={"smoke": {"d_model": 32, "d_head": 32, "d_mlp": 64}})
def build_attn2(config: Attn2Config, vocab_size: int, seq_len: int):
    """Two-layer one-head attention-first transformer of the assign-and-add study."""
    from study.models.nets.attn2 import Attn2Transformer
    return Attn2Transformer(config, vocab_size, seq_len)
