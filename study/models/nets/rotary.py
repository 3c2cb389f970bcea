"""Pre-LN rotary transformer: the binding study's GPT-2-like `gpt12` and the counting study's
two-layer `rope2` (one network, two configurations; see `study/models/rotary.py`).

Block l (pre-LN, sequential residual, as GPT-2 [paper: "LayerNorm before attention and MLP"]):

    x = resid[l]                                        # (batch, pos, d_model)
    x = x + attn_out[l]( drop( W_O · head[l]( attn(LN1(x)) ) ) )
    x = x + mlp_out[l]( drop( W_down · act(W_up · LN2(x)) ) )
    logits = unembed( LN_f( resid[n_layers] ) )         # untied, no bias [paper]

Rotary embeddings rotate the full head dimension of queries and keys, GPT-NeoX "rotate half"
convention, base 10000 [ours: RoFormer/GPT-NeoX default]; no learned positions. Linear layers
carry biases as in GPT-2 [ours: "architecturally similar to GPT-2"]; the unembedding has none.
Dropout (GPT-2 places): after the embedding, on attention probabilities, on both block outputs.
Initialisation follows GPT-2 [ours]: N(0, 0.02) weights and embeddings, output projections
scaled by 1/sqrt(2·n_layers), zero biases. `embed_std` sets the embedding's own std: at width
64 GPT-2's 0.02 leaves binding's lookup unlearnt for thousands of updates (the token identity is
too faint beside what the blocks add to the stream), N(0, 1) (torch's own embedding default)
learns it within a few thousand (docs/tasks/binding.md).

The rotary cos/sin tables are non-persistent buffers for the task's `seq_len` (checkpoints
carry no position state); a longer input gets fresh tables, so length generalisation works.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from study.models.nets.attention import CausalAttention
from study.models.sites import SiteKind, transformer_site_kinds
from study.models.sites.modules import Sites

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def rotary_tables(n_pos: int, d_rot: int, base: float,
                  device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of position × frequency, each (n_pos, d_rot), halves repeated (NeoX layout),
    on `device` (None: torch's default, as for any module built and then moved)."""
    f32 = dict(dtype=torch.float32, device=device)
    inv_freq = 1.0 / (base ** (torch.arange(0, d_rot, 2, **f32) / d_rot))
    angles = torch.outer(torch.arange(n_pos, **f32), inv_freq)  # (n_pos, d_rot/2)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate feature pairs (i, i + d/2) of x (batch, heads, pos, d) by position angles."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class RotaryAttention(CausalAttention):
    """Multi-head causal self-attention with one fused QKV projection and rotary q, k."""

    def __init__(self, d_model: int, n_heads: int, d_head: int, dropout: float):
        super().__init__()
        self.n_heads, self.d_head, self.dropout = n_heads, d_head, dropout
        self.qkv = nn.Linear(d_model, 3 * n_heads * d_head)  # rows: [q heads | k heads | v heads]
        self.proj = nn.Linear(n_heads * d_head, d_model)

    def heads(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """(batch, pos, d_model) -> per-head outputs concatenated, (batch, pos, n_heads*d_head)."""
        batch, n_pos, _ = x.shape
        q, k, v = (self.qkv(x).view(batch, n_pos, 3, self.n_heads, self.d_head)
                   .permute(2, 0, 3, 1, 4).unbind(0))  # each (batch, heads, pos, d_head)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # stay in the compute dtype (bf16 autocast)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = self.attend(q, k, v, self.dropout)  # (batch, heads, pos, d_head)
        return out.transpose(1, 2).reshape(batch, n_pos, self.n_heads * self.d_head)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = RotaryAttention(cfg.d_model, cfg.n_heads, cfg.d_head, cfg.dropout)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.up = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.down = nn.Linear(cfg.d_mlp, cfg.d_model)
        self.act = ACTIVATIONS[cfg.activation]
        self.drop = nn.Dropout(cfg.dropout)


def transformer_kinds(net) -> list[SiteKind]:
    """The site kinds a transformer `net` offers, with their counts and widths (its
    `site_kinds()`): from `net.n_layers` and its config's d_model, n_heads and d_head."""
    c = net.config
    return transformer_site_kinds(net.n_layers, c.d_model, c.n_heads * c.d_head)


class RotaryTransformer(nn.Module):
    """ids (batch, pos) -> logits (batch, pos, vocab_size); sites resid/attn_out/mlp_out/head."""

    def __init__(self, config, vocab_size: int, seq_len: int):
        super().__init__()
        self.config = config  # pyvene reads `model.config`
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.n_layers, self.n_heads = config.n_layers, config.n_heads
        self.embed = nn.Embedding(vocab_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.unembed = nn.Linear(config.d_model, vocab_size, bias=False)
        self.sites = Sites(resid=config.n_layers + 1, attn_out=config.n_layers,
                           mlp_out=config.n_layers, head=config.n_layers)
        cos, sin = rotary_tables(seq_len, config.d_head, config.rotary_base)
        self.register_buffer("rot_cos", cos, persistent=False)  # (seq_len, d_head)
        self.register_buffer("rot_sin", sin, persistent=False)
        self.reset_parameters()

    site_kinds = transformer_kinds  # the site kinds it offers, with counts and widths

    @property
    def device(self) -> torch.device:
        """Where the weights live (pyvene reads `model.device`)."""
        return self.embed.weight.device

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.init_std
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln_f"):
                p.fill_(1.0)
            elif name.endswith(("proj.weight", "down.weight")):
                p.normal_(0.0, std / math.sqrt(2 * self.n_layers))  # GPT-2 residual scaling
            elif name == "embed.weight":
                p.normal_(0.0, self.config.embed_std or std)
            else:
                p.normal_(0.0, std)

    def forward(self, ids: torch.Tensor, readout: torch.Tensor | None = None) -> torch.Tensor:
        """ids (batch, pos) -> logits (batch, pos, vocab); with `readout` (batch, pos) bool, only
        the logits of the True positions, (n_true, vocab), in row-major order (analyses that
        score a few positions skip the output layer everywhere else)."""
        n_pos = ids.shape[1]
        if n_pos <= self.rot_cos.shape[0]:
            cos, sin = self.rot_cos[:n_pos], self.rot_sin[:n_pos]
        else:
            # a longer input than the tables: fresh ones, computed on the CPU as the buffers
            # were (the positions they cover get bit-identical angles), then moved
            cos, sin = (t.to(ids.device) for t in rotary_tables(
                n_pos, self.config.d_head, self.config.rotary_base, device="cpu"))
        x = self.drop(self.embed(ids))  # (batch, pos, d_model)
        sites = self.sites
        for layer, block in enumerate(self.blocks):
            x = sites.resid[layer](x)
            heads = sites.head[layer](block.attn.heads(block.ln1(x), cos, sin))
            x = x + sites.attn_out[layer](block.drop(block.attn.proj(heads)))
            mlp = block.down(block.act(block.up(block.ln2(x))))
            x = x + sites.mlp_out[layer](block.drop(mlp))
        x = sites.resid[self.n_layers](x)
        if readout is not None:
            x = x[readout]  # (n_true, d_model)
        return self.unembed(self.ln_f(x))  # (batch, pos, vocab_size)
