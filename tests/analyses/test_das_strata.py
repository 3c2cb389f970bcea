"""DAS on binding's pairs split by source depth (table `das_strata`), and the option to test
only pairs whose source the network answers too (`das.tested=base_and_source`), with the
planted letter-copy network of `test_das_letters` (it answers every program by looking the
letter at `:` up)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from study.analyses.das import DasConfig
from study.analyses.das.search import search, site_data
from study.analyses.das.strata import stratum_rows, task_strata
from study.core.errors import UsageError
from study.core.tables import DAS_STRATA
from study.tasks.binding.vocab import DIGIT0, LETTER0
from tests.analyses.test_das_letters import CFG, LetterCopy, task  # noqa: F401  (fixture)


def test_das_strata_split_the_das_tables_tested_pairs_by_source_depth(task):  # noqa: F811
    model = LetterCopy().eval()
    train, test = (task.counterfactuals("query", n, split, 0)
                   for n, split in ((300, "train"), (600, "test")))
    strata = task_strata(task, test)
    assert set(strata) == {"source_depth"}
    # the laptop variant trains on chains of at most 2 hops: no source is deeper
    assert set(np.unique(strata["source_depth"])) == {1, 2}
    data = site_data(model, train, test, "resid", 0, -1, "cpu", outputs=task)
    cfg = replace(CFG, steps=20, lr=5e-2)
    kept = {}
    rows, _ = search(model, data, "query", -1, cfg, seed=0, checkpoint=3, kept=kept)
    fits = {(a, k): inst for (a, _, _, k), inst in kept.items()}
    split = DAS_STRATA.frame(stratum_rows(model, data, fits, strata, "query", -1, cfg, 3,
                                          "trained"))
    (whole,) = [r for r in rows if r["split"] == "test"]
    assert len(split) == 2 and set(split["value"]) == {1, 2} and (split["checkpoint"] == 3).all()
    # the strata partition the tested pairs: counts add up, the IIA is their weighted mean
    assert split["n_tested"].sum() == whole["n_tested"]
    assert split["n_changed"].sum() == whole["n_changed"]
    mean = (split["iia"] * split["n_tested"]).sum() / split["n_tested"].sum()
    assert mean == pytest.approx(whole["iia"])
    assert (split["n_tested"] >= cfg.min_changed).all() and split["iia"].between(0, 1).all()


class WrongOnE(LetterCopy):
    """The letter-copy network, but wrong on every program that queries `e`: one digit off."""

    def forward(self, ids):  # ids (batch, T)
        logits = super().forward(ids)
        query = 4 * 5 + 1  # the laptop variant's 5 lines: `#q:` puts q at 21
        if ids.shape[1] > query:
            wrong = ids[:, query] == LETTER0 + 4
            digits = logits[..., DIGIT0:DIGIT0 + 10]
            logits[..., DIGIT0:DIGIT0 + 10] = torch.where(wrong[:, None, None],
                                                          digits.roll(1, -1), digits)
        return logits


def test_base_and_source_keeps_only_pairs_whose_source_the_network_answers(task):  # noqa: F811
    model = WrongOnE().eval()
    train, test = (task.counterfactuals("query", n, split, 0)
                   for n, split in ((100, "train"), (600, "test")))
    base = site_data(model, train, test, "resid", 0, -1, "cpu", outputs=task)
    both = site_data(model, train, test, "resid", 0, -1, "cpu", outputs=task, source=True)
    source_asks_e = test.source_ids[:, 21] == LETTER0 + 4
    tested = base.test.tested.numpy()
    assert (tested & source_asks_e).sum() > 20  # the option has pairs to drop
    assert np.array_equal(both.test.tested.numpy(), tested & ~source_asks_e)
    # pairs that cannot say what the source should output are refused, not silently kept
    with pytest.raises(ValueError, match="source labels"):
        site_data(model, train, replace(test, source_labels=None), "resid", 0, -1, "cpu",
                  outputs=task, source=True)
    with pytest.raises(UsageError, match="das.tested"):
        DasConfig(tested="source")
