"""Which k a comparison is read at (`compare.k=auto`), and what each result is.

k [ours]: a variable needs as many dimensions as its values and their code take, and those
differ between variables and networks (binding's value needs k = 8–16 where its pointer fits
in 4). So each run's k is the smallest k whose *own* interchange IIA on validation pairs
(never test pairs) reaches `compare.k_bar`; a run that reaches it at no k is read at its best
validation k and marked not captured. Two runs are compared at the larger of their two ks
(`matched_k`), the smallest k at which both hold the variable; every k stays in the tables.

What a stitching result is [ours] (`classify`): network → network IIA is set against two
codes no network computed, fed into the same receiver through the same kind of map
(`codes`): a one-hot of the input window (the token the site has just read) and a one-hot of
the answer. A result counts as shared computation only where network → network clears both
codes by `compare.margin`:

- "not captured": the sender or the receiver stays below `k_bar` on validation pairs at k;
- "not shared": both hold it, but stitching does not clear the chance level by the margin;
- "computation": stitching clears the input code and the answer code by the margin;
- "input copy" / "output code": otherwise, whichever code comes closer to stitching.
"""
from __future__ import annotations

import math

VERDICTS = ("computation", "input copy", "output code", "not shared", "not captured")


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


def classify(iia: float, input_iia: float, output_iia: float, chance: float, captured: bool,
             margin: float) -> str:
    """What a stitching result is (see the module docstring); NaN codes count as 0."""
    if not captured:
        return "not captured"
    z = lambda v: 0.0 if v is None or math.isnan(v) else float(v)  # noqa: E731
    iia, input_iia, output_iia, chance = z(iia), z(input_iia), z(output_iia), z(chance)
    if iia < chance + margin:
        return "not shared"
    if iia >= max(input_iia, output_iia) + margin:
        return "computation"
    return "input copy" if input_iia >= output_iia else "output code"


def classify_interval(lo_over_input: float, lo_over_output: float, lo_over_chance: float,
                      input_iia: float, output_iia: float, captured: bool,
                      margin: float) -> str:
    """What a result over runs is (the rule of `classify`, on intervals over runs,
    `intervals.by_architecture`): computation only where the *lower* ends of the intervals of
    stitching minus each code clear the margin; not shared where the lower end of stitching
    minus the chance level does not."""
    if not captured:
        return "not captured"
    z = lambda v: -1.0 if v is None or math.isnan(v) else float(v)  # noqa: E731
    if z(lo_over_chance) <= margin:
        return "not shared"
    if z(lo_over_input) > margin and z(lo_over_output) > margin:
        return "computation"
    return "input copy" if z(input_iia) >= z(output_iia) else "output code"
