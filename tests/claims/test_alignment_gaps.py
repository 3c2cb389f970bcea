"""LAF against OAF over seeds, paired by run: the result tables `alignment_gaps.csv` and, per
run and as numbers, `run_gaps.csv`."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from study.claims.results import alignment_gaps_table, run_gaps_table


class _Run:
    def __init__(self, label, das, model="gru"):
        self.label, self.model, self.summary, self._das = label, model, {}, das
        self.seed = int(label.rsplit("s", 1)[1])

    def final(self, name):
        return self._das if name == "das" else None


def _das(test: dict, train: dict | None = None, k=16):
    """A run's das rows at one site: alignment -> test IIA (training IIA the same unless
    given), plus a second site whose test IIA is higher but whose training IIA is lower."""
    rows = []
    for a, iia in test.items():
        tr = (train or test)[a]
        for site, layer, t_iia, tr_iia in (("state", 0, iia, tr), ("state", 1, 0.99, tr - 0.1)):
            rows += [dict(variable="up_down:count", alignment=a, k=k, site=site, layer=layer,
                          position=-1, split=split, iia=v)
                     for split, v in (("train", tr_iia), ("test", t_iia))]
    return pd.DataFrame(rows)


def test_the_gap_is_paired_by_run_and_its_interval_is_a_t_interval_over_runs():
    oaf = [0.60, 0.70, 0.65]
    laf = [0.90, 0.92, 0.97]
    runs = [_Run(f"gru s{i}", _das({"oaf": o, "laf_sd": l})) for i, (o, l) in
            enumerate(zip(oaf, laf))]
    t = alignment_gaps_table(runs)
    row = t[t["alignment"] == "laf_sd"].iloc[0]
    d = np.array(laf) - np.array(oaf)
    assert row["n_runs"] == 3 and row["gap"] == pytest.approx(d.mean())
    half = 4.302652729911275 * d.std(ddof=1) / math.sqrt(3)  # t(0.975, 2)
    assert row["gap_lo"] == pytest.approx(d.mean() - half)
    assert row["gap_hi"] == pytest.approx(d.mean() + half)
    per_run = run_gaps_table(runs)
    assert per_run["gap"].dtype == float and list(per_run["run"]) == ["gru s0", "gru s1", "gru s2"]
    assert per_run["gap"].to_numpy() == pytest.approx(d)
    assert list(per_run["seed"]) == [0, 1, 2]


def test_each_run_is_read_at_the_site_its_training_pairs_choose_not_the_best_test_site():
    runs = [_Run("gru s0", _das({"oaf": 0.5, "laf_sd": 0.8}))]
    row = alignment_gaps_table(runs).iloc[0]
    assert row["iia"] == pytest.approx(0.8) and row["iia_reference"] == pytest.approx(0.5)
    assert math.isnan(row["gap_lo"])  # one run: no interval


def test_a_run_without_the_reference_alignment_is_left_out_of_the_pairing():
    runs = [_Run("gru s0", _das({"oaf": 0.5, "laf_sd": 0.8})),
            _Run("gru s1", _das({"laf_sd": 0.1}))]
    row = alignment_gaps_table(runs).iloc[0]
    assert row["n_runs"] == 1 and row["gap"] == pytest.approx(0.3)


def test_the_untrained_control_is_not_paired_as_an_alignment():
    runs = [_Run("gru s0", _das({"oaf": 0.5, "laf": 0.8, "random": 0.01}))]
    assert list(alignment_gaps_table(runs)["alignment"]) == ["laf"]
