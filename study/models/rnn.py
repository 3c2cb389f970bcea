"""Recurrent model families `gru` and `lstm` (Grant, Goodman & McClelland, TMLR 2025).

One recurrent cell over token embeddings, then an output MLP at every position [paper §
experiment setup; authors: `grantsrb/mas/seq_models.py`, `dl_utils/seq_models.py`]:
embedding 128; GRU `GRUCell(128, 128)`; LSTM `LSTMCell(128, 64)` with the analysed state
[h, c] (128); the MLP h -> 512 -> vocab (GELU, 50% dropout on the hidden layer) reads h
(128 for the GRU, 64 for the LSTM). The cell is unrolled in `study/models/nets/rnn.py` with one
`state[t]` site per token (pyvene's own per-timestep unit is broken).

Torch-free: this file registers the families; the network is imported when built.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import MAX_WIDTH, fixed, setting

CELLS = ("gru", "lstm")
ACTIVATIONS = ("gelu", "relu")


@dataclass(frozen=True)
class RNNConfig:
    """One recurrent cell + output MLP. Defaults: the paper's GRU."""

    cell: str = fixed("gru", "the cell: the family's (model=gru or model=lstm)")
    d_embed: int = setting(128, "token embedding [paper]")
    d_hidden: int = setting(
        128,
        "cell hidden size [paper]; the LSTM family uses 64 (state [h, c] = 128)")
    d_mlp: int = setting(512, "output MLP hidden layer, 4x d_model 128 [paper; authors]")
    dropout: float = setting(0.5, "on the MLP hidden layer [paper]")
    activation: str = setting("gelu", "gelu | relu, in the output MLP [paper]")

    def __post_init__(self):
        for key in ("d_embed", "d_hidden", "d_mlp"):
            value = getattr(self, key)
            if not isinstance(value, int) or not 1 <= value <= MAX_WIDTH:
                raise UsageError(f"model.{key}: {value!r} given; an integer in 1..{MAX_WIDTH} "
                                 f"is required")
        if not 0.0 <= self.dropout < 1.0:
            raise UsageError(f"model.dropout: {self.dropout!r} given; allowed: 0 <= dropout < 1")
        if self.activation not in ACTIVATIONS:
            raise UsageError(f"model.activation: {self.activation!r} is not one of "
                             f"{', '.join(ACTIVATIONS)}")

    @property
    def d_state(self) -> int:
        """Width of the analysed state: h (GRU) or [h, c] (LSTM)."""
        return self.d_hidden * (2 if self.cell == "lstm" else 1)

    def param_count(self, vocab_size: int, seq_len: int) -> int:
        """Number of parameters of the built network (sites carry none; seq_len is unused)."""
        gates = 3 if self.cell == "gru" else 4
        h, e, m = self.d_hidden, self.d_embed, self.d_mlp
        embed = vocab_size * e
        cell = gates * h * (e + h) + 2 * gates * h  # W_ih, W_hh, b_ih, b_hh
        head = (h * m + m) + (m * vocab_size + vocab_size)  # reads h
        return embed + cell + head


@dataclass(frozen=True)
class GRUConfig(RNNConfig):
    """The `gru` family: one GRU cell, hidden 128 [paper]."""


@dataclass(frozen=True)
class LSTMConfig(RNNConfig):
    """The `lstm` family: one LSTM cell, hidden 64, analysed state [h, c] of 128 [paper]."""

    cell: str = fixed("lstm", "the cell: the family's (model=gru or model=lstm)")
    d_hidden: int = setting(64, "cell hidden size [paper]; state [h, c] = 128")


def _build(config: RNNConfig, vocab_size: int, seq_len: int):
    from study.models.nets.rnn import RecurrentLM

    return RecurrentLM(config, vocab_size, seq_len)


# presets: paper is the defaults (the paper's and the authors' sizes), small the same (the
# networks are small); smoke: seconds, for tests
@register("model", "gru", config=GRUConfig, capabilities=("recurrent",),
          presets={"smoke": {"d_embed": 16, "d_hidden": 16, "d_mlp": 32}})
def gru(config: GRUConfig, vocab_size: int, seq_len: int):
    """One GRU cell (state 128) with an output MLP; a state site after every token."""
    return _build(config, vocab_size, seq_len)


@register("model", "lstm", config=LSTMConfig, capabilities=("recurrent",),
          presets={"smoke": {"d_embed": 16, "d_hidden": 8, "d_mlp": 32}})
def lstm(config: LSTMConfig, vocab_size: int, seq_len: int):
    """One LSTM cell (hidden 64, state [h, c] 128) with an output MLP; a state site per token."""
    return _build(config, vocab_size, seq_len)
