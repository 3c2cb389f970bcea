"""The recurrent network of the `gru` and `lstm` families: one cell unrolled over time.

    ids (batch, pos) -> embedding (batch, pos, d_embed)
      -> for t: state_t = cell(x_t, state_{t-1}); state_t = sites.state[t](state_t)
      -> output MLP at every position: state (d_state) -> d_mlp -> vocab   (GELU, dropout)

The cell is unrolled by hand so that each time step has its own site `sites.state[t]`
(pyvene's per-timestep unit for recurrent models is broken, `pyvene_sites.py`). Whatever leaves
`sites.state[t]` is what both the next step and the output head at t read, so replacing
state[t] changes the logits at t and every later step and nothing before t. For the LSTM the
state is [h, c] (batch, 2 * d_hidden) and the head reads all of it, so the paper's 128 -> 512
MLP applies to both cells [ours; the authors' LSTM head reads h only: docs/models/rnn.md].
The gates follow torch.nn.GRU / nn.LSTM exactly (the cell parameters are those of
nn.GRUCell / nn.LSTMCell), so weights move between the two.

Training is teacher-forced: the input at t is the true token. The paper feeds the model its
own outputs in the response phase; when every prediction is right the teacher-forced inputs
*are* the model's own outputs, so "every response token right under teacher forcing" is the
same event as free-running correctness, which is how trials are scored.

Speed: the input projections of all steps are one matmul before the loop; each step does
one (batch, d_hidden) x (d_hidden, gates*d_hidden) matmul plus elementwise gates. Under
bf16 autocast the matmuls run in bf16 while the state stays float32 (promotion against the
float32 initial state), so the recurrence does not accumulate bf16 rounding.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.sites import SiteKind
from models.sites.modules import Sites

_ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


class RecurrentLM(nn.Module):
    """Embedding -> one GRU/LSTM cell unrolled with a state site per token -> output MLP."""

    def __init__(self, config, vocab_size: int, seq_len: int):
        super().__init__()
        self.config = config
        self.is_lstm = config.cell == "lstm"
        self.d_hidden = config.d_hidden
        self.d_state = config.d_state
        self.n_steps = seq_len  # bounds the state[t] index
        self.n_layers, self.n_heads = 1, 0  # one recurrent cell, no attention
        self.embed = nn.Embedding(vocab_size, config.d_embed)
        cell_cls = nn.LSTMCell if self.is_lstm else nn.GRUCell
        self.cell = cell_cls(config.d_embed, config.d_hidden)
        self.sites = Sites(state=seq_len)
        self.head = nn.Sequential(
            nn.Linear(self.d_state, config.d_mlp),
            _ACTIVATIONS[config.activation](),
            nn.Dropout(config.dropout),  # on the hidden layer [paper]
            nn.Linear(config.d_mlp, vocab_size),
        )

    def site_kinds(self) -> list[SiteKind]:
        """The one site kind of a recurrent network: the state after every token."""
        return [SiteKind("state", self.n_steps, self.d_state)]

    def forward(self, ids: torch.Tensor, readout: torch.Tensor | None = None) -> torch.Tensor:
        """ids (batch, pos) -> logits (batch, pos, vocab); with `readout` (batch, pos) bool, only
        the logits of the True positions, (n_true, vocab), in row-major order (analyses that
        score a few positions skip the output layer everywhere else)."""
        batch, pos = ids.shape  # (batch, pos)
        if pos > self.n_steps:
            raise ValueError(f"sequence of {pos} tokens, the network was built for {self.n_steps}")
        x = self.embed(ids)  # (batch, pos, d_embed)
        cell = self.cell
        gi = F.linear(x, cell.weight_ih, cell.bias_ih)  # (batch, pos, gates * d_hidden)
        w_hh, b_hh = cell.weight_hh, cell.bias_hh
        H = self.d_hidden
        sites = self.sites.state
        states = []
        h = x.new_zeros(batch, H)  # float32 even under autocast: keeps the recurrence exact
        if self.is_lstm:
            c = x.new_zeros(batch, H)
            for t in range(pos):
                gates = gi[:, t] + F.linear(h, w_hh, b_hh)  # (batch, 4H): i, f, g, o
                i, f, g, o = gates.chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                s = sites[t](torch.cat([h, c], dim=1))  # (batch, 2H)
                h, c = s[:, :H], s[:, H:]
                states.append(s)
        else:
            for t in range(pos):
                gh = F.linear(h, w_hh, b_hh)  # (batch, 3H): r, z, n
                g_t = gi[:, t]
                rz = torch.sigmoid(g_t[:, : 2 * H] + gh[:, : 2 * H])
                r, z = rz[:, :H], rz[:, H:]
                n = torch.tanh(g_t[:, 2 * H:] + r * gh[:, 2 * H:])
                h = sites[t](n + z * (h - n))  # (1 - z) * n + z * h, (batch, H)
                states.append(h)
        states = torch.stack(states, dim=1)  # (batch, pos, d_state)
        return self.head(states if readout is None else states[readout])  # (batch, pos, vocab)
