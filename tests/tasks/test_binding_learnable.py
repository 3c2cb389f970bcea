"""Binding's laptop variant is learnable by the small transformer (slow: minutes on one core).

The property a researcher relies on when comparing architectures on binding: gpt12 at its
`small` size, with the `small` task and schedule, leaves the shallow rules' plateau and
learns the one-hop lookup within a laptop budget. At width 64 this depended on the embedding's
initial scale alone (docs/models/gpt12.md): a regression there shows up here first.
"""
from __future__ import annotations

import pandas as pd
import pytest


@pytest.mark.slow  # 12 minutes on one CPU core beside another run
def test_gpt12_small_learns_the_one_hop_lookup_of_bindings_laptop_variant(tmp_path):
    from study.run.config import resolve
    from study.run.runner import run

    cfg = resolve({"task": "binding", "model": "gpt12", "scale": "small", "seed": "0",
                   "train.steps": "3000",
                   "run_dir": str(tmp_path / "run")})
    run(cfg)
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    test = metrics[(metrics.split == "test") & (metrics.metric == "accuracy")]
    last = test[test.step == test.step.max()].set_index("stratum")["value"]
    # the best shallow rule scores 1.0 on one hop too, but the plateau network does not use
    # it (0.45-0.51 there); 0.9 on one hop is the lookup
    assert last["depth=1"] >= 0.9, last.to_dict()
    assert last["all"] >= 0.8, last.to_dict()
