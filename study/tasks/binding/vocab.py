"""Tokens of binding programs (Wu, Geiger, Millière 2025) and where they sit.

Tokens are a program's characters plus `PAD`: letters a-z (variables), digits 0-9 (values),
`=`, newline, `#` and `:`. Line k of a program occupies positions 4k..4k+3 (`x`, `=`,
right-hand side, newline); the query `#q:` the three positions after the last line, so the
answer is read out at `:`, position 4 * n_lines + 2.
"""
from __future__ import annotations

LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOCAB = ("PAD", *LETTERS, *"0123456789", "=", "\n", "#", ":")
PAD, LETTER0, DIGIT0, EQ, NL, HASH, COLON = 0, 1, 27, 37, 38, 39, 40
