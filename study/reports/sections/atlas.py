"""Section `atlas`, "What the architectures share". It opens with the atlas (`_atlas.py`):
where each family holds each variable, token role by layer, a heat map per family and
variable, so that a reader sees where each network holds it before reading what the
comparison says of it.
Then, per variable, the verdict of each ordered pair of architectures at its pairs' matched k
(`study.claims.shared.shared_stats`), with a column saying whether the pairs can separate the
variable from the input window and from the answer at all (`study.claims.rules.
identifiability`): where they cannot, the verdict is "confounded with ...", whatever the
networks compute. The chart gives every k: stitched over own IIA, the mean over pairs of
runs. Anchors: `<task>-atlas-<family>-<variable>`, `<task>-compare-shared-<variable>`."""
from __future__ import annotations

import altair as alt
import pandas as pd

from study.claims.cross import cross_table, with_receiver_control
from study.claims.intervals import LEVEL, interval_text
from study.claims.learnt import learnt_pairs
from study.claims.rules import identifiability
from study.claims.shared import STATS, pair_verdicts, shared_stats
from study.core.tables import COMPARE_STITCHING
from study.reports.figure import Figure, slug
from study.reports.sections import section
from study.reports.sections._atlas import atlas_figures
from study.reports.sections._common import MIN_CHART
from study.reports.sections._compare import sites_note


@section("atlas", "What the architectures share", order=41)
def build(runs) -> list[Figure]:
    figures = atlas_figures(runs)
    df = cross_table(runs, COMPARE_STITCHING.name)
    if df is None or df.empty:
        return figures
    df = pair_verdicts(with_receiver_control(df, runs))
    for variable in dict.fromkeys(df["variable"]):
        shared = _shared(df[df["variable"] == variable])
        if shared is not None:
            figures.append(shared)
    return figures


SHARED_NOTE = (
    "Each ordered pair of architectures at its pairs' matched k, over the pairs of runs that "
    "both learnt the task (a run never with itself): the mean and a {level:.0%} interval "
    "from resampling runs (each run counted once, not each pair of runs; none where too few "
    "runs let a draw differ: one run a side, or two runs of one architecture). Verdict: "
    "\"computation\" where the lower ends of the intervals of stitching minus the input code "
    "and minus the answer code both clear the margin and the mean stitched IIA comes within "
    "the margin of B's own; \"partial computation\" where it clears both codes but falls "
    "short of B's own by more than the margin; \"input copy\" or \"output code\" "
    "where one of the codes comes that close (the nearer one); \"not shared\" where "
    "stitching minus the chance level does not clear the margin; \"not captured\" where most "
    "pairs of runs hold a run below the validation bar at the matched k. \"B shuffled\": B's "
    "own search trained with the variable's values shuffled across pairs of the same value "
    "(for a letter, the same letter), at B's site and the same k, the null of B's own "
    "interchange. The chart gives every k: stitched over own IIA, the mean over pairs of "
    "runs, the matched k ringed. \"Can the pairs tell?\": the share of the changed pairs a "
    "network holding only the input window, or only the answer, would get right; where one "
    "comes within the margin of 1 no interchange can clear it, and the verdict says "
    "\"confounded with\" it: other pairs, or another site, would separate them.")


def _shared(df: pd.DataFrame) -> Figure | None:
    """The figure of every k (stitched / own ratio by architecture pair) with the table of
    verdicts from intervals over runs; None for tables without the codes."""
    needed = {"input_code_iia", "output_code_iia", "chance_iia", "matched_k", "val_iia"}
    pairs = learnt_pairs(df)
    if pairs.empty or not needed <= set(pairs.columns):
        return None
    variable = pairs["variable"].iloc[0]
    pairs = pairs.assign(ratio=pairs["iia"] / pairs["own_iia"].where(pairs["own_iia"] > 0),
                         direction=pairs["model"] + " → " + pairs["other_model"],
                         matched=pairs["k"] == pairs["matched_k"])
    curve = pairs.groupby(["direction", "k"], as_index=False).agg(
        ratio=("ratio", "mean"), stitched=("iia", "mean"), own=("own_iia", "mean"),
        matched=("matched", "any"))
    x = alt.X("k:O", title="k (subspace size)")
    y = alt.Y("ratio:Q", title="stitched / own IIA", scale=alt.Scale(domain=[0, 1.2],
                                                                       clamp=True))
    color = alt.Color("direction:N", title="A → B")
    tip = ["direction:N", "k:O", alt.Tooltip("ratio:Q", format=".2f"),
           alt.Tooltip("stitched:Q", format=".2f"), alt.Tooltip("own:Q", format=".2f"),
           "matched:N"]
    base = alt.Chart(curve).encode(x=x, y=y, color=color, tooltip=tip)
    chart = alt.layer(base.mark_line(point=True),
                      base.transform_filter("datum.matched").mark_point(size=220,
                                                                        strokeWidth=2)
                      ).properties(width=MIN_CHART, height=220)
    return Figure(key=slug("compare-shared", variable),
                  title=f"{variable}: what the architectures share, at every k",
                  caption=SHARED_NOTE.format(level=LEVEL) + sites_note(df),
                  chart=chart, table=verdicts(pairs))


def verdicts(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per ordered architecture pair at the matched k: runs, stitched IIA, own IIA, the codes,
    the chance level and B's shuffled control, each a mean [interval over runs], and the
    verdict."""
    rows = []
    for r in shared_stats(pairs).to_dict("records"):
        g = pairs[(pairs["model"] == r["model"]) & (pairs["other_model"] == r["other_model"])
                  & (pairs["k"] == pairs["matched_k"])]
        mean = lambda c: float(g[c].mean()) if c in g and len(g) else float("nan")  # noqa: E731
        rows.append({"A": r["model"], "B": r["other_model"],
                     "runs": f"{r['n_runs']} × {r['n_other_runs']}", "matched k": r["k"],
                     "can the pairs tell?": identifiability(mean("confound_input"),
                                                            mean("confound_answer")),
                     **{name: interval_text(r, c) for c, name in STATS.items()},
                     "verdict": r["verdict"]})
    return pd.DataFrame(rows)
