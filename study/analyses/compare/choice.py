"""Which k a comparison is read at (`compare.k=auto`).

k [ours]: a variable needs as many dimensions as its values and their code take, and those
differ between variables and networks (binding's value needs k = 8–16 where its pointer fits
in 4). So each run's k is the smallest k whose *own* interchange IIA on validation pairs
(never test pairs) reaches `compare.k_bar`; a run that reaches it at no k is read at its best
validation k and marked not captured. Two runs are compared at the larger of their two ks
(`matched_k`), the smallest k at which both hold the variable; every k stays in the tables.

What each result is, from the codes (`codes`) and this choice: `study.claims.rules`.
"""
from __future__ import annotations

import math


def auto_k(val_iia: dict[int, float], bar: float) -> tuple[int, bool]:
    """(k, captured): the smallest k whose validation IIA reaches `bar`, else the k with the
    best validation IIA (the smallest of equals) and False."""
    known = {k: v for k, v in val_iia.items() if not math.isnan(v)}
    if not known:
        return min(val_iia), False
    good = sorted(k for k, v in known.items() if v >= bar)
    if good:
        return good[0], True
    best = max(known.values())
    return min(k for k, v in known.items() if v == best), False


def matched_k(k_a: int, k_b: int) -> int:
    """The k two runs are compared at: the larger of their own ks."""
    return max(k_a, k_b)
