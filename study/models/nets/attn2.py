"""The assign-and-add transformer: attention-first, no LayerNorm, no biases, MLP only at the end.

Weights use TransformerLens names and shapes so QK/OV circuits read directly off them
(QK_h = W_Q[h] @ W_K[h].T, OV_h = W_V[h] @ W_O[h]):

    W_E (vocab, d_model)   W_pos (seq_len, d_model)   W_U (d_model, vocab)
    blocks[l].attn.W_Q / W_K / W_V (n_heads, d_model, d_head)   .W_O (n_heads, d_head, d_model)
    blocks[l].mlp.W_in (d_model, d_mlp)   .W_out (d_mlp, d_model)   (only layers in mlp_layers)

Forward (resid[l] enters layer l; causal softmax attention scaled by 1/sqrt(d_head)):

    x = W_E[ids] + W_pos[:pos]
    x = x + attn_out[l]( head[l](z) @ W_O )        z = softmax(q kᵀ) v per head
    x = x + mlp_out[l]( act(x @ W_in) @ W_out )    only for l in mlp_layers
    logits = resid[n_layers](x) @ W_U

[paper, Exoo et al. 2026; code `bexoo/assign-and-add`] 2 layers, 1 head, d_model = d_head =
128, d_mlp 512, ReLU, no normalisation, no biases (the authors zero and freeze
TransformerLens' biases), the layer-1 MLP removed, learned absolute positions, a separate
unembedding; initialisation N(0, 0.8/sqrt(d_model)) for every weight (TransformerLens'
default), no dropout.
[ours] The authors unembed onto the 59 numbers only (`d_vocab_out=MOD`) and score the last
position over them (`logits[:, -1, :MOD]`, `bexoo/assign-and-add` train.py); here W_U maps
onto the whole task vocabulary so that every task runs on every model, and the task declares
its output vocabulary (`Task.output_ids`: the 59 numbers for assign_add), over which the
training loss, the accuracy and analyses' `correct` take the softmax / argmax. The loss is
then the authors' exactly; the extra W_U columns get no gradient from it (AdamW's weight
decay still shrinks them, and they add (vocab - 59) x d_model parameters).
A layer without an MLP keeps its `sites.mlp_out[l]` entry so indices line up with layers, but
that site never runs (there is no MLP output to read); `model.mlp_layers` lists the layers
that have one.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from study.models.nets.attention import CausalAttention
from study.models.nets.rotary import transformer_kinds
from study.models.sites.modules import Sites


class Attn2Attention(CausalAttention):
    """Bias-free multi-head causal attention with per-head W_Q, W_K, W_V, W_O."""

    def __init__(self, d_model: int, n_heads: int, d_head: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, pos, d_model) -> per-head outputs concatenated, (batch, pos, n_heads*d_head)."""
        batch, n_pos, _ = x.shape
        w_qkv = torch.cat([self.W_Q, self.W_K, self.W_V], dim=0)  # (3*heads, d_model, d_head)
        qkv = torch.einsum("bpd,hde->bhpe", x, w_qkv)  # one batched matmul
        q, k, v = qkv.split(self.n_heads, dim=1)  # each (batch, heads, pos, d_head)
        z = self.attend(q, k, v)
        return z.transpose(1, 2).reshape(batch, n_pos, self.n_heads * self.d_head)

    def project(self, heads: torch.Tensor) -> torch.Tensor:
        """(batch, pos, n_heads*d_head) -> (batch, pos, d_model) through W_O."""
        return heads @ self.W_O.reshape(self.n_heads * self.d_head, -1)


class Attn2MLP(nn.Module):
    def __init__(self, d_model: int, d_mlp: int, activation: str):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(d_model, d_mlp))
        self.W_out = nn.Parameter(torch.empty(d_mlp, d_model))
        self.act = F.relu if activation == "relu" else F.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x @ self.W_in) @ self.W_out


class Attn2Block(nn.Module):
    def __init__(self, cfg, has_mlp: bool):
        super().__init__()
        self.attn = Attn2Attention(cfg.d_model, cfg.n_heads, cfg.d_head)
        self.mlp = Attn2MLP(cfg.d_model, cfg.d_mlp, cfg.activation) if has_mlp else None


class Attn2Transformer(nn.Module):
    """ids (batch, pos) -> logits (batch, pos, vocab_size); sites resid/attn_out/mlp_out/head."""

    def __init__(self, config, vocab_size: int, seq_len: int):
        super().__init__()
        self.config = config  # pyvene reads `model.config`
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.n_layers, self.n_heads = config.n_layers, config.n_heads
        self.mlp_layers = tuple(config.mlp_layers())
        self.W_E = nn.Parameter(torch.empty(vocab_size, config.d_model))
        self.W_pos = nn.Parameter(torch.empty(seq_len, config.d_model))
        self.blocks = nn.ModuleList(Attn2Block(config, layer in self.mlp_layers)
                                    for layer in range(config.n_layers))
        self.W_U = nn.Parameter(torch.empty(config.d_model, vocab_size))
        self.sites = Sites(resid=config.n_layers + 1, attn_out=config.n_layers,
                           mlp_out=config.n_layers, head=config.n_layers)
        self.reset_parameters()

    site_kinds = transformer_kinds  # the site kinds it offers, with counts and widths

    @property
    def device(self) -> torch.device:
        """Where the weights live (pyvene reads `model.device`)."""
        return self.W_E.device

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.init_scale / math.sqrt(self.config.d_model)
        for p in self.parameters():
            p.normal_(0.0, std)
        if self.config.embed_std:
            self.W_E.normal_(0.0, self.config.embed_std)

    def forward(self, ids: torch.Tensor, readout: torch.Tensor | None = None) -> torch.Tensor:
        """ids (batch, pos) -> logits (batch, pos, vocab); with `readout` (batch, pos) bool, only
        the logits of the True positions, (n_true, vocab), in row-major order (analyses that
        score a few positions skip the output layer everywhere else)."""
        n_pos = ids.shape[1]
        if n_pos > self.W_pos.shape[0]:
            raise ValueError(f"attn2 has learned positions for {self.W_pos.shape[0]} tokens; "
                             f"got a sequence of {n_pos}")
        x = self.W_E[ids] + self.W_pos[:n_pos]  # (batch, pos, d_model)
        sites = self.sites
        for layer, block in enumerate(self.blocks):
            x = sites.resid[layer](x)
            heads = sites.head[layer](block.attn.heads(x))  # (batch, pos, n_heads*d_head)
            x = x + sites.attn_out[layer](block.attn.project(heads))
            if block.mlp is not None:
                x = x + sites.mlp_out[layer](block.mlp(x))
        x = sites.resid[self.n_layers](x)
        if readout is not None:
            x = x[readout]  # (n_true, d_model)
        return x @ self.W_U  # (batch, pos, vocab_size)
