"""A new model family is one file: an Elman network defined and registered here, in-process,
trains on counting, runs every analysis its capabilities allow and appears in the report at
scale=smoke, with no edit anywhere else.

Family `toy_elman` [ours]: embedding -> tanh recurrence unrolled with a `state` site after
every token -> linear readout. It declares the `recurrent` capability, and the registry
checks the network it builds against `study.core.network.Network`.
"""
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from study.models.sites import SiteKind
from study.models.sites.modules import Sites
from study.core import registry
from tests.conftest import report_charts


@dataclass(frozen=True)
class ElmanConfig:
    d_embed: int = 16
    d_hidden: int = 16

    def param_count(self, vocab_size: int, seq_len: int) -> int:
        e, h = self.d_embed, self.d_hidden
        return vocab_size * e + (e * h + h) + (h * h) + (h * vocab_size + vocab_size)


class Elman(nn.Module):
    """ids (batch, pos) -> logits (batch, pos, vocab); state site (batch, d_hidden) per token."""

    def __init__(self, config: ElmanConfig, vocab_size: int, seq_len: int):
        super().__init__()
        self.n_layers, self.n_heads, self.n_steps = 1, 0, seq_len
        self.d_hidden = config.d_hidden
        self.embed = nn.Embedding(vocab_size, config.d_embed)
        self.w_in = nn.Linear(config.d_embed, config.d_hidden)
        self.w_h = nn.Linear(config.d_hidden, config.d_hidden, bias=False)
        self.out = nn.Linear(config.d_hidden, vocab_size)
        self.sites = Sites(state=seq_len)

    def site_kinds(self) -> list[SiteKind]:
        return [SiteKind("state", self.n_steps, self.d_hidden)]

    def forward(self, ids: torch.Tensor, readout: torch.Tensor | None = None) -> torch.Tensor:
        x = self.w_in(self.embed(ids))  # (batch, pos, d_hidden)
        h = x.new_zeros(ids.shape[0], self.d_hidden)
        states = []
        for t in range(ids.shape[1]):
            h = self.sites.state[t](torch.tanh(x[:, t] + self.w_h(h)))  # (batch, d_hidden)
            states.append(h)
        states = torch.stack(states, dim=1)  # (batch, pos, d_hidden)
        return self.out(states if readout is None else states[readout])


registry.register("model", "toy_elman", config=ElmanConfig, capabilities=("recurrent",),
                  presets={"smoke": {}})(Elman)


def test_a_one_file_model_family_trains_is_analysed_and_reported(tmp_path):
    from study.reports.write import write_report
    from study.run.config import resolve
    from study.run.runner import run

    analyses = [name for name, e in registry.entries("analysis").items()
                if e.requires <= registry.get("model", "toy_elman").capabilities]
    assert {"das", "patching", "probes"} <= set(analyses)
    run_dir = tmp_path / "elman"
    cfg = resolve({"task": "counting", "model": "toy_elman", "scale": "smoke",
                   "train.steps": "10", "analyses": ",".join(analyses),
                   "run_dir": str(run_dir)})
    rd = run(cfg)
    assert rd.status() == "done"
    for name in analyses:  # each writes its table (subspaces needs two alignments to compare)
        table = run_dir / "analyses" / name / f"{name}.parquet"
        assert table.exists(), name
        assert name == "subspaces" or len(pd.read_parquet(table)), name
    charts = report_charts(write_report([run_dir], tmp_path / "report", markdown=False))
    assert {r["model"] for r in charts["counting-das-iia"]} == {"toy_elman"}
    patched = charts["counting-patching-pair-sites"]  # its state site, patched at each step
    assert {r["run"] for r in patched} == {"toy_elman s0"}
    assert "state" in {r["site_layer"] for r in patched}
