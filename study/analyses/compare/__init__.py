"""Comparisons across runs: the same causal variable in different architectures, seeds and
checkpoints of one task, read through each run's DAS alignment.

Not a per-checkpoint analysis: it needs several trained runs at once, which the application
loads and hands in (`study compare RUN_DIR ...`, and the end of `study sweep`). Everything
here is a pure function of networks, their saved alignments and the task:

- `measures`: basis-free similarity (linear CKA [Kornblith et al. 2019], orthogonal
  Procrustes) with a shuffled-inputs baseline;
- `projection`: a run's aligned subspace as read/write maps (`Subspace`);
- `paired`: the position correspondence — the task's counterfactual pairs, each run read at
  the pair's base and source positions;
- `values`: the variable's values laid out in one run's subspace (top two PCs);
- `stitch`: cross-model interchange through a least-squares map between subspaces;
- `sites`: which of a run's saved sites is read (`compare.site`);
- `tables` (here): the three tables over every pair of subjects.

Tables (one row per compared pair, run paths as given):
- `compare_similarity`: variable, run, other_run, checkpoint, other_checkpoint, measure,
  value, baseline (shuffled inputs), random_subspace (other run's random-rotation subspace),
  plus model, other_model, site, other_site, alignment, k, n_inputs;
- `compare_geometry`: variable, run, checkpoint, model, site, alignment, k, value, pc1, pc2,
  sd1, sd2, n, held_out;
- `compare_stitching`: variable, run (A), other_run (B), checkpoint, other_checkpoint, iia,
  own_iia, shuffled_map_iia, random_subspace_iia (each over B's tested test pairs: B gives
  the base label on the base and not the counterfactual one, `stitch`), fit_r2, n_changed
  (the causal model's changed pairs), n_tested (B's tested pairs), plus model, other_model,
  site, other_site, alignment, k.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from study.core.errors import UsageError
from study.core.settings import setting

_ALIGNMENTS = ("oaf", "laf", "laf_sd")


@dataclass(frozen=True)
class CompareConfig:
    alignment: str = setting("oaf", "the DAS alignment compared: oaf | laf | laf_sd [ours: "
                             "oaf, whose subspace is an orthogonal projection]")
    variables: tuple[str, ...] = setting((), "() = every variable the runs' alignments share")
    k: tuple[int, ...] = setting((), "subspace sizes compared; () = every k both runs saved")
    n_fit: int = setting(1000, "[ours] train-split pairs the stitching map is fitted on")
    n_test: int = setting(500, "[ours] test-split pairs: similarity inputs and stitching IIA")
    n_geometry: int = setting(300, "[ours] sequences per split laid out in the value geometry")
    n_perm: int = setting(5, "[ours] permutations averaged in the shuffled-inputs baseline")
    seed: int = setting(0, "pairs, permutations and generated random rotations")
    site: tuple[str, ...] = setting(("best",), "the saved DAS site each run is read at: best "
                                    "(its alignment's best training IIA at that k), first | "
                                    "last (shallowest | deepest layer), or site keys in order "
                                    "of preference, e.g. state@21,resid[2]@21 [ours]")

    def __post_init__(self):
        if self.alignment not in _ALIGNMENTS:
            raise UsageError(f"compare.alignment={self.alignment!r}: choose from "
                             f"{', '.join(_ALIGNMENTS)}")
        for key in ("n_fit", "n_test", "n_geometry", "n_perm"):
            if getattr(self, key) < 1:
                raise UsageError(f"compare.{key}={getattr(self, key)}: must be at least 1")
        if self.k and min(self.k) < 1:
            raise UsageError("compare.k: give integers >= 1")
        from study.analyses.compare.sites import check_site_setting
        check_site_setting(self.site)


@dataclass
class Subject:
    """One run at one checkpoint, loaded by the application."""

    run: str  # the run directory
    model_name: str
    checkpoint: int
    model: Any  # the network, eval mode, on the device
    alignments: Path  # its das alignments file for this checkpoint


def compare(subjects: list[Subject], task, cfg: CompareConfig, device) -> dict:
    """The three comparison tables over every (ordered) pair of subjects of one task."""
    from study.analyses.compare.tables import build_tables
    if not subjects:
        raise UsageError("compare: no runs with das alignments")
    return build_tables(subjects, task, cfg, device)
