"""Every verdict rule, in one place [ours].

**Can the pairs tell?** (`confounded`): before any verdict, the pair set is asked whether a
network holding only the input window at the site, or only the answer, would give its
counterfactual labels (`study.analyses.common.identify`). Where one would on so many pairs
that no IIA could clear it by `MARGIN`, the verdict is "confounded with the input" or
"confounded with the answer", never "aligned" or "computation": other pairs or another site
must separate them. Elsewhere its share counts among the controls.

**Is a variable aligned in one run?** (`verdict`): a trained alignment's test IIA, with its
95 % interval over the tested pairs, against its controls (an untrained random rotation, the
same search with the variable's values shuffled across pairs, the same search on the step-0
network, the two planted codes): "aligned" where the interval's lower end clears the highest control by `MARGIN`
and the IIA reaches `ALIGNED_IIA`; "partial" where it clears them but the IIA is lower; "not
aligned" otherwise; "too few pairs" where the IIA is not scored; "no control" where the
random or the shuffled control is missing (a missing step-0 control leaves the bar to the
other two).

**Is a variable shared by two networks?** What a cross-run stitching result is:
computation, partial computation, input copy, output code, not shared or not captured. Each
pair of runs is named with `classify` (`study.claims.shared.pair_verdicts`); each pair of
architectures with `classify_interval`, on intervals over runs.

Network → network stitching is set against two codes no network computed, fed into the same
receiver through the same kind of map: a one-hot of the input window (the token the site has
just read) and a one-hot of the answer. Two networks that both hold a linear code of the
token they just read, or of the answer about to be read out, stitch into each other whatever
they compute, so a result counts as shared computation only where network → network clears
both codes by a margin (`compare.margin`):

- "not captured": the sender or the receiver stays below its validation bar at k;
- "not shared": both hold it, but stitching does not clear the chance level by the margin;
- "computation": stitching clears the input code and the answer code by the margin and comes
  within the margin of the receiver's own interchange;
- "partial computation": it clears both codes by the margin but falls short of the receiver's
  own interchange by more than the margin: some of what the receiver computes is reachable
  from the sender's subspace, not all of it (e.g. stitched 0.32 into a receiver whose own
  subspace scores 0.97);
- "input copy" / "output code": otherwise, whichever code comes closer to stitching.
"""
from __future__ import annotations

import math

MARGIN = 0.1  # the lower end of the interval must clear every control by this much
ALIGNED_IIA = 0.9  # and the IIA itself reach this, for "aligned"
ALIGNED = ("aligned", "partial", "not aligned", "confounded with the input",
           "confounded with the answer", "too few pairs", "no control", "did not learn")
BAR = "max(random, shuffled, step 0, input code, answer code)"
RULE = (f"aligned: the lower end of the 95 % interval ≥ {BAR} + {MARGIN} and IIA ≥ "
        f"{ALIGNED_IIA}; partial: the lower end ≥ {BAR} + {MARGIN} and IIA < {ALIGNED_IIA}; "
        f"not aligned: otherwise")


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def confounded(confound_input: float = float("nan"),
               confound_answer: float = float("nan")) -> str | None:
    """"confounded with the input" / "... the answer" where a network holding only the input
    window or only the answer would score so high on the pairs (`confound_*`: the shares of
    `study.analyses.common.identify.confounds`) that no interchange could clear it by
    `MARGIN`: the pairs cannot separate the variable from it, whatever the network computes;
    None where they can (or where the shares are unknown)."""
    shares = {"the input": confound_input, "the answer": confound_answer}
    shares = {k: float(v) for k, v in shares.items() if not _nan(v)}
    if not shares or max(shares.values()) + MARGIN <= 1.0:
        return None
    top = max(shares.values())
    return "confounded with " + " and ".join(k for k, v in shares.items() if v + MARGIN > 1.0
                                             and v >= top - 1e-12)


def identifiability(confound_input: float = float("nan"),
                    confound_answer: float = float("nan")) -> str:
    """Whether the pairs can separate the variable from the input window and from the answer,
    in words with the two shares (`confounded`): "yes (input 0.12, answer 0.40)", "no:
    confounded with the answer (input 0.12, answer 1.00)", or "not measured"."""
    if _nan(confound_input) and _nan(confound_answer):
        return "not measured"
    shares = ", ".join(f"{name} {'?' if _nan(v) else f'{float(v):.2f}'}"
                       for name, v in (("input", confound_input), ("answer", confound_answer)))
    said = confounded(confound_input, confound_answer)
    return f"yes ({shares})" if said is None else f"no: {said} ({shares})"


def verdict(iia: float, lo: float, random: float, shuffled: float,
            step0: float = float("nan"), confound_input: float = float("nan"),
            confound_answer: float = float("nan")) -> str:
    """'aligned' | 'partial' | 'not aligned' by the rule above, the planted codes' shares
    (`confounded`) counting among the controls; 'confounded with ...' where the pairs cannot
    separate the variable from the input or the answer; 'too few pairs' where the IIA is not
    scored, 'no control' where the random or the shuffled control is missing (a missing
    step-0 control leaves the bar to the other two)."""
    if _nan(iia) or _nan(lo):
        return "too few pairs"
    said = confounded(confound_input, confound_answer)
    if said:
        return said
    if _nan(random) or _nan(shuffled):
        return "no control"
    bar = max(c for c in (random, shuffled, step0, confound_input, confound_answer)
              if not _nan(c))
    if lo >= bar + MARGIN:
        return "aligned" if iia >= ALIGNED_IIA else "partial"
    return "not aligned"


VERDICTS = ("computation", "partial computation", "input copy", "output code", "not shared",
            "not captured", "confounded with the input", "confounded with the answer",
            "code not identifiable")


def classify(iia: float, input_iia: float, output_iia: float, chance: float, captured: bool,
             margin: float, own_iia: float | None = None, confound_input: float = float("nan"),
             confound_answer: float = float("nan")) -> str:
    """What a stitching result is (see the module docstring); NaN codes count as 0, a missing
    own IIA as no shortfall; pairs that cannot separate the variable from the input or the
    answer (`confounded`) give that instead."""
    if not captured:
        return "not captured"
    said = confounded(confound_input, confound_answer)
    if said:
        return said
    z = lambda v: 0.0 if v is None or math.isnan(v) else float(v)  # noqa: E731
    iia, input_iia, output_iia, chance = z(iia), z(input_iia), z(output_iia), z(chance)
    if iia < chance + margin:
        return "not shared"
    if iia >= max(input_iia, output_iia) + margin:
        over_own = None if own_iia is None else iia - float(own_iia)
        return "partial computation" if short_of_own(over_own, margin) else "computation"
    return "input copy" if input_iia >= output_iia else "output code"


def classify_interval(lo_over_input: float, lo_over_output: float, lo_over_chance: float,
                      input_iia: float, output_iia: float, captured: bool,
                      margin: float, over_own: float | None = None,
                      confound_input: float = float("nan"),
                      confound_answer: float = float("nan")) -> str:
    """What a result over runs is (the rule of `classify`, on intervals over runs):
    computation only where the *lower* ends of the intervals of stitching minus each code
    clear the margin; not shared where the lower end of stitching minus the chance level does
    not; partial where the mean of stitching minus the receiver's own IIA (`over_own`) falls
    below minus the margin; "confounded with ..." first, where the pairs cannot tell."""
    if not captured:
        return "not captured"
    said = confounded(confound_input, confound_answer)
    if said:
        return said
    z = lambda v: -1.0 if v is None or math.isnan(v) else float(v)  # noqa: E731
    if z(lo_over_chance) < margin:
        return "not shared"
    if z(lo_over_input) >= margin and z(lo_over_output) >= margin:
        return "partial computation" if short_of_own(over_own, margin) else "computation"
    return "input copy" if z(input_iia) >= z(output_iia) else "output code"


def short_of_own(over_own: float | None, margin: float) -> bool:
    """Whether stitching minus the receiver's own IIA falls below minus the margin (a missing
    or NaN difference is no shortfall)."""
    return over_own is not None and not math.isnan(over_own) and over_own < -margin
