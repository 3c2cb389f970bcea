"""Tokens of counting sequences (Grant, Goodman, McClelland, TMLR 2025) and their classes.

A sequence is `B`, n demonstration tokens, the trigger `T`, n response tokens, `E`, then
`PAD`s. Variants [paper, `grantsrb/mas/tasks.py`] differ in the token classes (`Alphabet`):
`multi_object` (demos D0/D1/D2 drawn uniformly, response R), `single_object` (D / R),
`same_object` (D / D). One vocabulary serves every variant so that models trained on one can
be compared on another; `U` is the void token (`generate`).
"""
from __future__ import annotations

from dataclasses import dataclass

VOCAB = ("PAD", "B", "E", "T", "D0", "D1", "D2", "D", "R", "U")  # U: the void token
ID = {t: i for i, t in enumerate(VOCAB)}  # token -> id
VARIANTS = ("multi_object", "single_object", "same_object")


@dataclass(frozen=True)
class Alphabet:
    """The token classes of one task variant."""

    demo: tuple[str, ...]  # demonstration tokens
    resp: str  # the response token
    bos: str = "B"
    eos: str = "E"
    trig: str = "T"


ALPHABETS = {
    "multi_object": Alphabet(demo=("D0", "D1", "D2"), resp="R"),
    "single_object": Alphabet(demo=("D",), resp="R"),
    "same_object": Alphabet(demo=("D",), resp="D"),
}
