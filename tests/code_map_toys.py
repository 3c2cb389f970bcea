"""The toy entries tests/test_code_map.py adds to a copy of the tree: one per row of
docs/code.md's table of the files each kind of entry is added by, each made of those files
only (a new file, text appended to a shared one, or lines of a network and its registration
replaced: a site kind is offered by networks that exist), and what then runs them.

- task `counting2`: the counting task under another name;
- model family `gru2`: the `gru` network under another name;
- analysis `norms`: the mean norm of each default site's activation, with its table and its
  report section;
- alignment `toy`: an orthogonal alignment with seeds of its own;
- report section `notes`: each run's test accuracy;
- site kind `embed`: the token embeddings of `attn2`, before the positions are added.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Change:
    """One file of a toy entry: `text` is a new file's, or is appended to an existing file
    (`append`); `replace` swaps lines of an existing file, each (old, new) found once."""

    path: str
    text: str = ""
    append: bool = False
    replace: tuple[tuple[str, str], ...] = ()

    def apply(self, root: Path) -> None:
        file = root / self.path
        if self.replace:
            text = file.read_text(encoding="utf-8")
            for old, new in self.replace:
                assert text.count(old) == 1, f"{self.path}: {old!r} is not there once"
                text = text.replace(old, new)
            file.write_text(text, encoding="utf-8")
        elif self.append:
            file.write_text(file.read_text(encoding="utf-8") + self.text, encoding="utf-8")
        else:
            assert not file.exists(), f"{self.path} exists already"
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(self.text, encoding="utf-8")


TASK = '''"""Task `counting2`: the counting task under another name (a toy entry)."""
from study.core.registry import register
from study.tasks.counting import CountingConfig, CountingTask


@register("task", "counting2", config=CountingConfig,
          presets={"smoke": {"n_train": 64, "n_val": 32, "n_test": 32}})
class Counting2(CountingTask):
    """The counting task under another name (a toy entry of the tests)."""

    name = "counting2"
'''

FAMILY = '''"""Model family `gru2`: the `gru` network under another name (a toy entry). Torch-free:
the network is imported when built."""
from study.core.registry import register
from study.models.rnn import GRUConfig


@register("model", "gru2", config=GRUConfig, capabilities=("recurrent",),
          presets={"smoke": {"d_embed": 16, "d_mlp": 32, "d_hidden": 16}})
def gru2(config: GRUConfig, vocab_size: int, seq_len: int):
    """The gru network under another name (a toy entry of the tests)."""
    from study.models.nets.gru2 import Gru2
    return Gru2(config, vocab_size, seq_len)
'''

NETWORK = '''"""The network of the toy family `gru2`."""
from study.models.nets.rnn import RecurrentLM


class Gru2(RecurrentLM):
    """The recurrent network of `gru`."""
'''

ANALYSIS = '''"""Analysis `norms`: the mean norm of each default site's activation over test sequences
(a toy entry)."""
from dataclasses import dataclass

from study.core.registry import register
from study.core.settings import setting


@dataclass(frozen=True)
class NormsConfig:
    n: int = setting(32, "test sequences read")


@register("analysis", "norms", config=NormsConfig)
def run(ctx):
    """The mean activation norm at each default site (a toy entry of the tests)."""
    import torch

    from study.core.tables import NORMS
    from study.models.sites import default_sites
    from study.models.sites.capture import capture

    ids = torch.as_tensor(ctx.task.split("test").ids[:ctx.config.n], device=ctx.device)
    sites = default_sites(ctx.model)
    with torch.no_grad(), capture(ctx.model, sites) as acts:
        ctx.model(ids)
    norms = {site: float(a.norm(dim=-1).mean()) for site, a in acts.items()}
    return {"norms": NORMS.frame((ctx.checkpoint, *site, norms[site]) for site in sites)}
'''

TABLE = '''
NORMS = Table("norms", "norms", ("checkpoint", "site", "layer", "norm"))  # a toy entry's
TABLES[NORMS.name] = NORMS
'''

NORMS_SECTION = '''"""Section: the `norms` table, one bar per run and site (a toy entry)."""
import altair as alt
import pandas as pd

from study.reports.figure import Figure
from study.reports.sections import section


@section("norms", "Activation norms", order=95)
def build(runs) -> list[Figure]:
    parts = [d.assign(run=r.label) for r in runs if (d := r.final("norms")) is not None]
    if not parts:
        return []
    chart = alt.Chart(pd.concat(parts)).mark_bar().encode(x="site:N", y="norm:Q", color="run:N")
    return [Figure(key="norms", title="Activation norms", chart=chart,
                   caption="The mean norm of each site's activation.")]
'''

ALIGNMENT = '''"""`toy`: an orthogonal alignment with seeds of its own (a toy entry)."""
from study.analyses.das.alignments import AlignmentKind, register_alignment


def make(embed_dim: int, k: int, seed: int, laf_form: str = "sd"):
    import torch
    from study.analyses.das.alignment import OrthogonalAlignment
    torch.manual_seed(seed)
    return OrthogonalAlignment(embed_dim, k)


register_alignment(AlignmentKind("toy", order=4, seed_index=4, make=make,
                                 help="orthogonal, seeds of its own", label="toy OAF"))
'''

NOTES_SECTION = '''"""Section: each run's test accuracy (a toy entry)."""
import altair as alt
import pandas as pd

from study.reports.figure import Figure
from study.reports.sections import section


@section("notes", "Test accuracy", order=96)
def build(runs) -> list[Figure]:
    rows = [{"run": r.label, "accuracy": r.summary.get("test_accuracy")} for r in runs]
    return [Figure(key="notes", title="Test accuracy", caption="Each run's test accuracy.",
                   chart=alt.Chart(pd.DataFrame(rows)).mark_bar().encode(x="run:N",
                                                                          y="accuracy:Q"))]
'''

# row of docs/code.md's table -> (the names its placeholders take, the files)
TOYS: dict[str, tuple[dict[str, str], tuple[Change, ...]]] = {
    "task": ({"name": "counting2"}, (
        Change("study/tasks/counting2/__init__.py", TASK),
        Change("docs/tasks/counting2.md", "# Task `counting2`: counting under another name\n"))),
    "model family": ({"module": "gru2", "page": "gru2"}, (
        Change("study/models/gru2.py", FAMILY),
        Change("study/models/nets/gru2.py", NETWORK),
        Change("docs/models/gru2.md", "# Model `gru2`: the `gru` network under another name\n"))),
    "analysis": ({"name": "norms"}, (
        Change("study/analyses/norms/__init__.py", ANALYSIS),
        Change("study/core/tables.py", TABLE, append=True),
        Change("study/reports/sections/norms.py", NORMS_SECTION),
        Change("docs/analyses.md", "\n## `norms`\n\nA toy entry: mean activation norms.\n",
               append=True))),
    "alignment": ({"name": "toy"}, (
        Change("study/analyses/das/alignments/toy.py", ALIGNMENT),)),
    "report section": ({"name": "notes"}, (
        Change("study/reports/sections/notes.py", NOTES_SECTION),)),
    "site kind": ({"module": "attn2"}, (
        Change("study/core/sites.py", '\nSEQUENCE_KINDS = (*SEQUENCE_KINDS, "embed")  # a toy '
               'entry\nKINDS = SEQUENCE_KINDS + STEP_KINDS\nHOOK_SHAPES["embed"] = '
               '"(batch, pos, d_model)"\n', append=True),
        Change("study/core/network.py", '\nCAPABILITIES["embeddings"] = Capability(  # a toy '
               'entry\n    "embeddings", "token embeddings at `embed[0]`", site_kinds=("embed",))\n',
               append=True),
        Change("study/models/nets/attn2.py", replace=(
            ("head=config.n_layers)", "head=config.n_layers, embed=1)"),
            ("    site_kinds = transformer_kinds  # the site kinds it offers, with counts and "
             "widths\n",
             "    def site_kinds(self):\n        from study.models.sites import SiteKind\n"
             "        return [*transformer_kinds(self), SiteKind(\"embed\", 1, "
             "self.config.d_model)]\n"),
            ("x = self.W_E[ids] + self.W_pos[:n_pos]",
             "x = self.sites.embed[0](self.W_E[ids]) + self.W_pos[:n_pos]"))),
        Change("study/models/attn2.py", replace=(
            ('"weights_view", "learned_positions"),',
             '"weights_view", "learned_positions", "embeddings"),'),)))),
}

# what runs them in the copy (cwd: the copy; argv[1]: where the runs go): compare takes the
# toy alignment; `gru2` trains on `counting2` for a few steps; `attn2` learns it (counts up to
# 6: 100 updates) so that DAS has tested pairs, at its `embed` site for the OAF, the toy
# alignment and the control; both run `norms`, and each run writes its report
RUNS = '''
import sys
from study.analyses.compare import CompareConfig
from study.run.config import resolve
from study.run.runner import run

CompareConfig(alignment="toy")
smoke = {"task": "counting2", "scale": "smoke", "train.steps": "4", "analyses": "norms"}
run(resolve({**smoke, "model": "gru2", "run_dir": sys.argv[1] + "/gru2"}))
run(resolve({**smoke, "model": "attn2", "run_dir": sys.argv[1] + "/attn2",
             "task.max_count": "6", "task.held_out": "5", "train.steps": "100",
             "train.lr": "0.01", "analyses": "das,norms", "das.sites": "embed",
             "das.layers": "0", "das.alignments": "oaf,toy,random",
             "das.variables": "up_down:count", "das.k": "1", "das.steps": "2",
             "das.restarts": "1", "das.controls": "false"}))
'''
