"""What each architecture pair shares: the verdict table under the stitching section follows
intervals over runs (each run counted once), not the mean over pairs of runs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from study.claims.intervals import by_architecture, run_interval
from study.reports.sections.atlas import verdicts


def _rows(receiver_input: dict, iia=0.95, output=0.3, chance=0.25, val=0.95, k=4, own=0.97):
    """Stitching rows between every pair of runs of x (x0-x2) and y (y0-y2); the input
    code's IIA is a property of the receiving run (`receiver_input`: run -> IIA)."""
    runs = [("x", f"x{i}") for i in range(3)] + [("y", f"y{i}") for i in range(3)]
    return pd.DataFrame([dict(
        variable="v", run=a, other_run=b, model=ma, other_model=mb, k=k, matched_k=k,
        iia=iia, own_iia=own, input_code_iia=receiver_input.get(b, 0.3),
        output_code_iia=output, chance_iia=chance, val_iia=val, other_val_iia=val,
        k_bar=0.9, margin=0.1) for ma, a in runs for mb, b in runs])


def _verdict(table, a, b):
    return table[(table["A"] == a) & (table["B"] == b)].iloc[0]["verdict"]


def test_a_pair_clears_both_codes_by_the_margin_over_runs_is_computation():
    table = verdicts(_rows({}))
    assert set(table["verdict"]) == {"computation"}
    assert set(table["runs"]) == {"3 × 3"}


def test_the_verdict_follows_the_interval_over_runs_not_the_mean_over_pairs():
    """y0 copies its input (its input code stitches as well as x does): the mean over pairs
    clears the input code by 0.32, but one receiving run in three is enough for the interval
    over runs to reach the margin, so the result is not claimed as computation."""
    rows = _rows({"y0": 0.9, "y1": 0.5, "y2": 0.5})
    into_y = rows[(rows["model"] == "x") & (rows["other_model"] == "y")
                  & (rows["run"] != rows["other_run"])]
    assert (into_y["iia"] - into_y["input_code_iia"]).mean() > 0.3  # the mean clears
    table = verdicts(rows)
    assert _verdict(table, "x", "y") == "input copy"
    assert _verdict(table, "y", "x") == "computation"


@pytest.mark.parametrize("change,verdict", [
    (dict(output=0.9), "output code"),
    (dict(iia=0.3, chance=0.25), "not shared"),
    (dict(val=0.5), "not captured"),
    (dict(iia=0.6, output=0.1, own=0.97), "partial computation"),
])
def test_output_codes_failed_stitching_and_uncaptured_variables_are_named(change, verdict):
    assert set(verdicts(_rows({}, **change))["verdict"]) == {verdict}


def test_the_interval_resamples_runs_not_pairs_of_runs():
    """Two runs of x, one near 0.5 and one near 0.9 with every y: resampling runs gives means
    0.5, 0.7 and 0.9, so the interval spans both runs; resampling the six pairs as if they
    were independent would give a narrower one."""
    m = np.array([[0.5, 0.5, 0.5], [0.9, 0.9, 0.9]])
    mean, lo, hi = run_interval([[np.array([v]) for v in row] for row in m], same=False)
    assert mean == pytest.approx(0.7) and lo <= 0.5 and hi >= 0.9
    pairs = np.random.default_rng(0).choice(m.ravel(), size=(2000, 6)).mean(1)
    assert np.percentile(pairs, 97.5) - np.percentile(pairs, 2.5) < hi - lo


def test_runs_of_one_architecture_are_never_paired_with_themselves():
    """Within one architecture, a run drawn twice is still one run: the diagonal (a run with
    itself, 1.0) never enters the mean or the interval."""
    m = np.full((3, 3), 0.4)
    np.fill_diagonal(m, 1.0)
    rows = pd.DataFrame([dict(run=f"x{i}", other_run=f"x{j}", model="x", other_model="x",
                              s=m[i, j]) for i in range(3) for j in range(3)])
    r = by_architecture(rows, ["s"]).iloc[0]
    assert r["n_pairs"] == 6 and r["s"] == pytest.approx(0.4)
    assert r["s_lo"] == pytest.approx(0.4) and r["s_hi"] == pytest.approx(0.4)


def test_an_iia_over_few_tested_pairs_gets_a_wider_interval_than_over_many():
    """The hierarchical bootstrap draws each pair of runs' tested pairs too: the same IIAs
    measured on 20 pairs each are less certain than on 2,000."""
    def width(n):
        rows = pd.DataFrame([dict(run=f"x{i}", other_run=f"y{j}", model="x", other_model="y",
                                  iia=0.6 + 0.05 * ((i + j) % 3), n_tested=n)
                             for i in range(3) for j in range(3)])
        r = by_architecture(rows, ["iia"]).iloc[0]
        return r["iia_hi"] - r["iia_lo"]
    assert width(20) > width(2000)


def test_too_few_runs_give_no_interval_and_the_verdict_says_it_rests_on_means():
    """Two runs of one architecture have one pair of distinct runs, which every draw repeats:
    no interval, not a zero-width one."""
    rows = _rows({})
    two = rows[~rows["run"].isin(["x2", "y2"]) & ~rows["other_run"].isin(["x2", "y2"])]
    cells = [[None, np.array([0.9])], [np.array([0.8]), None]]
    assert np.isnan(run_interval(cells, same=True)[1])
    table = verdicts(two)
    within = table[(table["A"] == "x") & (table["B"] == "x")].iloc[0]
    assert within["stitched IIA"] == "0.95" and "too few runs" in within["verdict"]
    across = table[(table["A"] == "x") & (table["B"] == "y")].iloc[0]
    assert "[" in across["stitched IIA"] and across["verdict"] == "computation"


def test_each_pair_is_shown_at_its_matched_k_and_every_k_in_the_ratio_chart():
    """The matrices and the verdicts read each pair at its matched k (no fixed k <= 4); the
    chart of stitched / own IIA keeps every k compared."""
    from study.claims.cross import at_matched_k
    from study.reports.sections.atlas import _shared
    parts = []
    for k in (1, 2, 4, 8):
        rows = _rows({}, k=k)
        matched = np.where((rows["model"] == "y") | (rows["other_model"] == "y"), 8, 2)
        parts.append(rows.assign(matched_k=matched, iia=0.5 + k / 20))
    every = pd.concat(parts, ignore_index=True)
    shown = at_matched_k(every)
    assert len(shown) == 36 and (shown["k"] == shown["matched_k"]).all()
    assert set(shown.loc[shown["model"] == "y", "k"]) == {8}
    fig = _shared(every)
    data = fig.chart.to_dict()["datasets"]
    ks = {row["k"] for rows in data.values() for row in rows}
    assert ks == {1, 2, 4, 8}
    assert set(fig.table["matched k"]) == {"2", "8"}


def test_the_shared_table_holds_each_pair_s_means_intervals_and_verdict():
    """The numbers the report formats are the numbers the result folder keeps: per ordered
    pair, each measure's mean and interval over runs, and the same verdict."""
    from study.claims.shared import STATS, shared_stats
    rows = _rows({"y0": 0.9, "y1": 0.5, "y2": 0.5})
    stats = shared_stats(rows)
    shown = verdicts(rows)
    assert list(stats["verdict"]) == list(shown["verdict"])
    xy = stats[(stats["model"] == "x") & (stats["other_model"] == "y")].iloc[0]
    assert xy["iia"] == pytest.approx(0.95) and xy["k"] == "4"
    assert xy["input_code_iia_lo"] <= xy["input_code_iia"] <= xy["input_code_iia_hi"]
    assert xy["over_input"] == pytest.approx(xy["iia"] - xy["input_code_iia"])
    assert np.isnan(xy["shuffled_iia"])  # no receiver control in these rows
    assert {f"{c}{e}" for c in STATS for e in ("", "_lo", "_hi")} <= set(stats.columns)


class _Run:
    """A loaded run as the report sections see it: a label, a summary and its tables."""

    def __init__(self, label, shuffled):
        self.label, self.summary, self._t = label, {"test_accuracy": 1.0}, shuffled

    def final(self, name):
        return self._t if name == "das_shuffled" else None


def test_b_s_shuffled_control_is_read_at_b_s_site_alignment_and_k():
    """The control beside a stitched IIA is the receiving run's own shuffled search at the
    site the stitching wrote into, the same alignment and k, on test pairs: not another
    site's, k's or split's."""
    from study.claims.cross import with_receiver_control

    def row(site, layer, k, split, iia, alignment="oaf"):
        return dict(checkpoint=100, variable="query", site=site, layer=layer, position=-1,
                    alignment=alignment, k=k, split=split, iia=iia)
    table = pd.DataFrame([row("resid", 2, 4, "test", 0.11), row("resid", 2, 4, "train", 0.5),
                          row("resid", 1, 4, "test", 0.7), row("resid", 2, 8, "test", 0.8),
                          row("resid", 2, 4, "test", 0.9, alignment="laf")])
    runs = [_Run("a s0", table.assign(iia=0.99)), _Run("b s0", table)]
    df = pd.DataFrame([dict(run="a s0", other_run="b s0", variable="query", alignment="oaf",
                            k=4, other_site="resid[2]@pair"),
                       dict(run="b s0", other_run="a s0", variable="query", alignment="oaf",
                            k=16, other_site="resid[2]@pair")])
    out = with_receiver_control(df, runs)
    assert out["shuffled_iia"].iloc[0] == pytest.approx(0.11)
    assert np.isnan(out["shuffled_iia"].iloc[1])  # a k b saved no control at


def test_pairs_of_runs_where_a_run_does_not_hold_the_variable_are_left_out_not_voted_on():
    """y2 holds no subspace for the variable (its own validation IIA is under the bar): the
    pairs with y2 leave the means (its stitched IIA of 0.1 pulls nothing down), and the
    architecture pairs keep their verdict from the runs that hold it."""
    from study.claims.shared import shared_stats
    rows = _rows({})
    y2 = (rows["run"] == "y2") | (rows["other_run"] == "y2")
    rows.loc[rows["other_run"] == "y2", "other_val_iia"] = 0.5
    rows.loc[rows["run"] == "y2", "val_iia"] = 0.5
    rows.loc[y2, "iia"] = 0.1
    stats = shared_stats(rows[rows["run"] != rows["other_run"]])
    xy = stats[(stats["model"] == "x") & (stats["other_model"] == "y")].iloc[0]
    assert xy["iia"] == pytest.approx(0.95) and xy["verdict"] == "computation"
    assert xy["n_other_runs"] == 2
    every = rows.assign(val_iia=0.5)
    assert set(shared_stats(every[every["run"] != every["other_run"]])["verdict"]) == {
        "not captured"}


def test_identifiability_names_what_the_pairs_cannot_separate():
    """Shares within the margin of 1 say "no: confounded with" the input or the answer; lower
    shares say "yes"; no shares say so."""
    from study.claims.rules import identifiability
    assert identifiability(0.2, 1.0) == "no: confounded with the answer (input 0.20, answer 1.00)"
    assert identifiability(0.97, 0.3).startswith("no: confounded with the input")
    assert identifiability(0.5, 0.6) == "yes (input 0.50, answer 0.60)"
    assert identifiability() == "not measured"


def test_what_the_architectures_share_comes_first_and_says_whether_the_pairs_can_tell():
    """The section "What the architectures share" comes before the stitching detail, and its
    verdict table says per architecture pair whether the pairs can separate the variable
    from the input and the answer, with the two shares: pairs whose answer share is 1 are
    "no: confounded with the answer", and so is the verdict."""
    from study.reports.sections import sections
    from study.reports.sections.atlas import _shared
    order = [s.name for s in sections()]
    assert order.index("atlas") < order.index("compare_stitching")
    rows = _rows({}).assign(confound_input=0.3, confound_answer=0.5)
    told = _shared(rows).table["can the pairs tell?"]
    assert set(told) == {"yes (input 0.30, answer 0.50)"}
    rows = rows.assign(confound_answer=1.0)
    table = _shared(rows).table
    assert set(table["can the pairs tell?"]) == {
        "no: confounded with the answer (input 0.30, answer 1.00)"}
    assert set(table["verdict"]) <= {"confounded with the answer", "not captured"}
