"""A new task is one file: a toy task defined and registered here, in-process, runs training,
every analysis that applies to it and the report at scale=smoke, with no edit in analyses/.

Task `toy` [ours]: recall the first token. A sequence is `n_digits` digits then `=`; the
answer, predicted at `=`, is the first digit. Causal variable `first` (the first digit); its
counterfactual pairs change the first digit (the answer follows), kind `distractor` changes
the last digit (the answer stays). It relies on the Task defaults for everything analyses
read (probe variable `output`, no attention targets or progress measures, `name=value`
stratum labels).
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch

from study.core import registry
from study.tasks.base import IGNORE, Examples, Pairs, Task
from tests.conftest import report_charts


@dataclass(frozen=True)
class ToyConfig:
    seed: int = 0  # data seed
    n_symbols: int = 4  # digits 0..n_symbols-1
    n_digits: int = 4  # digits per sequence
    n_train: int = 2000
    n_test: int = 200


class ToyTask(Task):
    """Recall the first of a few digits (a toy task of the test suite)."""

    name = "toy"
    causal_variables: ClassVar[tuple[str, ...]] = ("first",)
    counterfactual_kinds: ClassVar[tuple[str, ...]] = ("first", "distractor")
    train_presets: ClassVar[dict] = {
        "smoke": dict(steps=20, batch_size=32, lr=3e-3, warmup_steps=2, eval_examples=64,
                      checkpoints=2),
    }

    @property
    def vocab(self):
        return ("PAD", "=", *map(str, range(self.config.n_symbols)))

    @property
    def seq_len(self) -> int:
        return self.config.n_digits + 1

    def render(self, ids) -> str:
        return " ".join(self.vocab[int(i)] for i in ids if i != self.pad_id)

    def label_of(self, labels) -> int:
        return int(np.asarray(labels)[np.asarray(labels) != IGNORE][0]) - 2

    @property
    def splits(self):
        return ("train", "val", "test")

    def _digits(self, n: int, *tags) -> np.ndarray:
        rng = np.random.default_rng([self.config.seed, *tags])
        return rng.integers(self.config.n_symbols, size=(n, self.config.n_digits))  # (n, d)

    def _encode(self, digits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """digits (n, d) -> ids (n, d + 1), labels (n, d + 1): the first digit at `=`."""
        ids = np.concatenate([digits + 2, np.ones((len(digits), 1), np.int64)], axis=1)
        labels = np.full(ids.shape, IGNORE, np.int64)
        labels[:, -1] = ids[:, 0]
        return ids, labels

    def generate(self, split: str) -> Examples:
        n = self.config.n_train if split == "train" else self.config.n_test
        digits = self._digits(n, ("train", "val", "test").index(split))
        ids, labels = self._encode(digits)
        return Examples(ids, labels, {"first": digits[:, 0]})

    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        base = self._digits(n, 10, ("train", "val", "test").index(split), seed)
        source = base.copy()
        col = 0 if kind == "first" else -1
        source[:, col] = (base[:, col] + 1 + self._digits(n, 11, seed)[:, 0]
                          % (self.config.n_symbols - 1)) % self.config.n_symbols
        base_ids, base_labels = self._encode(base)
        source_ids, source_labels = self._encode(source)
        cf = source_labels if kind == "first" else base_labels
        aligned = np.full(n, -1, np.int64)
        return Pairs(kind, base_ids, source_ids, base_labels, cf.copy(), aligned, aligned.copy(),
                     {"first": base[:, 0], "value": source[:, col]})


registry.register("task", "toy", config=ToyConfig, presets={"smoke": {}})(ToyTask)

ANALYSES = ("probes", "patching", "das", "subspaces")  # every one a GRU supports


def test_toy_task_trains_runs_every_analysis_and_reports(tmp_path):
    from study.reports.write import write_report
    from study.run.config import resolve
    from study.core.rundir import RunDir
    from study.run.runner import run

    run_dir = tmp_path / "toy-run"
    cfg = resolve({"task": "toy", "model": "gru", "scale": "smoke",
                   "analyses": ",".join(ANALYSES), "run_dir": str(run_dir)})
    rd = run(cfg)
    assert isinstance(rd, RunDir) and rd.status() == "done"
    tables = {"probes": ["probes"], "patching": ["patching", "head_ranking", "positions"],
              "das": ["das"], "subspaces": ["subspaces"]}
    for analysis, names in tables.items():
        for table in names:
            assert (run_dir / "analyses" / analysis / f"{table}.parquet").exists(), table
    probes = pd.read_parquet(run_dir / "analyses" / "probes" / "probes.parquet")
    assert set(probes.variable) == {"output"}  # the Task default: the scored labels
    das = pd.read_parquet(run_dir / "analyses" / "das" / "das.parquet")
    assert set(das.variable) == {"first"} and das.iia.between(0, 1).all()
    patching = pd.read_parquet(run_dir / "analyses" / "patching" / "patching.parquet")
    assert set(patching.counterfactual) == {"first", "distractor"}
    html = write_report([run_dir], tmp_path / "report", markdown=False)
    for page in (html, run_dir / "report.html"):  # the shared report and the run's own
        charts = report_charts(page)
        assert {r["variable"] for r in charts["toy-das-iia"]} == {"first"}, page
        kinds = {r["counterfactual"] for r in charts["toy-patching-gru-s0"]}
        assert "first" in kinds and any(k.startswith("distractor") for k in kinds), page


def test_circuits_runs_on_the_toy_task_with_the_task_defaults(tmp_path):
    from study.analyses.common.context import AnalysisContext

    task = ToyTask(ToyConfig())
    me = registry.get("model", "attn2")
    torch.manual_seed(0)
    model = me.obj(me.make_config("smoke"), len(task.vocab), task.seq_len).eval()
    cfg = registry.get("analysis", "circuits").make_config("smoke")
    ctx = AnalysisContext(model, task, cfg, "attn2", 0, torch.device("cpu"),
                          tmp_path, 0)
    out = registry.get("analysis", "circuits").obj(ctx)
    scores = set(out["circuits"].score)
    assert {"prev_token", "induction", "ov_copy_frac", "qk_prev_pos"} <= scores
    assert not any(s.startswith(("attn_to_", "fourier", "qk_num", "probe_")) for s in scores)
    assert {"first=0", "first=3"} <= set(out["ablation"].stratum)


@pytest.mark.parametrize("kind,changed", [("first", True), ("distractor", False)])
def test_toy_counterfactual_kinds(kind, changed):
    p = ToyTask(ToyConfig()).counterfactuals(kind, 20, split="train", seed=1)
    differs = (p.base_ids != p.source_ids).any(axis=1)
    assert differs.all() and (p.changed == changed).all()
