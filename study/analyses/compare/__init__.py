"""Comparisons across runs: the same causal variable in different architectures, seeds and
checkpoints of one task, read through each run's DAS alignment.

Not a per-checkpoint analysis: it needs several trained runs at once, which the application
loads and hands in (`study compare RUN_DIR ...`, and the end of `study sweep`). Everything
here is a pure function of networks, their saved alignments and the task:

- `measures`: basis-free similarity (linear CKA [Kornblith et al. 2019], orthogonal
  Procrustes) with a shuffled-inputs baseline;
- `projection`: a run's aligned subspace as read/write maps (`Subspace`);
- `paired`: the position correspondence — the task's counterfactual pairs, each run read at
  the pair's base and source positions (`compare.site=atlas`: at its own atlas cell's token
  role in each, on the pairs that hold both runs' roles);
- `values`: the variable's values laid out in one run's subspace (top two PCs);
- `stitch`: cross-model interchange through a least-squares map between subspaces;
- `codes`: the network-free controls: one-hot codes of the input window, of the answer
  (per scored position) and of the read position, stitched into each run the same way;
- `decode`: decode-then-write stitching (A's value decoded, B's class mean written);
- `choice`: the k each run is read at (`compare.k=auto`, on validation pairs); what each
  result is (computation, input copy, ...) is `study.claims.rules`;
- `sites`: which of a run's saved sites is read (`compare.site`; `atlas`: each run at its
  own atlas cell, `study.analyses.atlas`);
- `tables` (here): the three tables over every pair of subjects.

At `compare.site=atlas` two runs may be read at different token roles. A -> B then maps A's
coordinates read at A's role in each source to B's written at B's role in each base, the
counterfactual label staying the pair's; everything B receives is at B's cell: `own_iia` is
B's alignment at B's cell, the input code the window up to B's written position, the
position code B's position, and the answer code the pair's label keyed relative to B's
written position. `n_changed`, `n_tested` and every IIA of a row are on the pairs that hold
both runs' roles; `val_iia`, `other_val_iia` and the own k (`auto_k`) are each run's own, on
the validation pairs that hold its role.

Tables (one row per compared pair, run paths as given; `role` and `other_role` name the
token role each run was read at, "" where it was read at the pair's own positions):
- `compare_similarity`: variable, run, other_run, checkpoint, other_checkpoint, measure,
  value, baseline (shuffled inputs), random_subspace (other run's random-rotation subspace),
  plus model, other_model, site, other_site, alignment, k, n_inputs, input_code and
  output_code (the measure between the one-hot input-window / answer code and other_run's
  subspace), matched_k (the pair's k, `choice`), role, other_role;
- `compare_geometry`: variable, run, checkpoint, model, site, alignment, k, value, pc1, pc2,
  sd1, sd2, n, held_out, auto_k (the run's own k, `choice`), role (the run's cell's; the
  values are laid out at every position where the variable is defined, whatever the role);
- `compare_stitching`: variable, run (A), other_run (B), checkpoint, other_checkpoint, iia,
  own_iia, shuffled_map_iia, random_subspace_iia (each over B's tested test pairs: B gives
  the base label on the base and not the counterfactual one, `stitch`), fit_r2, n_changed
  (the causal model's changed pairs), n_tested (B's tested pairs), plus model, other_model,
  site, other_site, alignment, k, then input_code_iia and output_code_iia (the network-free
  codes stitched into B, `codes`), chance_iia (B written with other pairs' sources),
  window_changed (share of pairs whose input window differs between base and source),
  val_iia / other_val_iia (A's / B's own IIA on validation pairs at k), auto_k /
  other_auto_k (each run's own k), matched_k (the pair's), k_bar and margin
  (the settings the verdict uses: `study.claims.shared.pair_verdicts`; "code not
  identifiable" where the answer code is refused and could have decided it), then decode_iia (decode-then-write
  stitching, `decode`), position_code_iia (the read position's one-hot code stitched into
  B, `codes`), output_code_coverage and position_code_coverage (the share of changed test
  pairs whose written key was seen in fitting; under 95 % the code's IIA is NaN),
  code_refusal (why a code was refused, "" when none was), confound_input and
  confound_answer (`study.analyses.common.identify`, at B's read positions), role and
  other_role.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from study.analyses.das.alignments import trained
from study.core.alignments import REFERENCE
from study.core.errors import UsageError
from study.core.settings import setting


@dataclass(frozen=True)
class CompareConfig:
    alignment: str = setting(REFERENCE, f"the DAS alignment compared: {' | '.join(trained())} "
                             f"[ours: {REFERENCE}, whose subspace is an orthogonal projection]")
    variables: tuple[str, ...] = setting((), "() = every variable the runs' alignments share")
    k: Literal["auto"] | tuple[int, ...] = setting(
        "auto", "subspace sizes compared: auto (every k both runs saved; each pair read at "
        "its matched k: the larger of the two runs' smallest k whose own validation IIA "
        "reaches k_bar) or integers (only these, the matched k chosen among them) [ours]")
    k_bar: float = setting(0.9, "[ours] own validation IIA a run must reach at a k to hold "
                           "the variable there (compare.k=auto)")
    margin: float = setting(0.1, "[ours] IIA by which network -> network stitching must "
                            "clear the input-code and answer-code stitching (and the chance "
                            "level) to count as shared computation")
    input_window: int = setting(2, "[ours] tokens up to the read position in the input code "
                                "(2: the token read there and the one before it)")
    n_fit: int = setting(1000, "[ours] train-split pairs the stitching map is fitted on")
    n_test: int = setting(500, "[ours] test-split pairs: similarity inputs and stitching IIA")
    n_geometry: int = setting(300, "[ours] sequences per split laid out in the value geometry")
    n_perm: int = setting(5, "[ours] permutations averaged in the shuffled-inputs baseline")
    seed: int = setting(0, "pairs, permutations and generated random rotations")
    site: tuple[str, ...] = setting(("best",), "the saved DAS site each run is read at: best "
                                    "(its alignment's best training IIA at that k), first | "
                                    "last (shallowest | deepest layer), atlas (each run at its "
                                    "own atlas cell for the variable: its role, site and layer; "
                                    "needs analysis=atlas), or site keys in order of "
                                    "preference, e.g. state@21,resid[2]@21 [ours]")

    def __post_init__(self):
        if self.alignment not in trained():
            raise UsageError(f"compare.alignment={self.alignment!r}: choose from "
                             f"{', '.join(trained())}")
        for key in ("n_fit", "n_test", "n_geometry", "n_perm"):
            if getattr(self, key) < 1:
                raise UsageError(f"compare.{key}={getattr(self, key)}: must be at least 1")
        if self.k != "auto" and (not self.k or min(self.k) < 1):
            raise UsageError(f"compare.k={self.k}: give auto or integers >= 1")
        if not 0 < self.k_bar <= 1:
            raise UsageError(f"compare.k_bar={self.k_bar}: give an IIA in (0, 1]")
        if not 0 <= self.margin < 1:
            raise UsageError(f"compare.margin={self.margin}: give an IIA difference in [0, 1)")
        if self.input_window < 1:
            raise UsageError(f"compare.input_window={self.input_window}: must be at least 1")
        from study.analyses.compare.sites import ATLAS, check_site_setting
        check_site_setting(self.site)
        if self.site == ATLAS and self.alignment != "oaf":
            raise UsageError(f"compare.alignment={self.alignment}: the atlas saves OAF only; "
                             f"compare.site=atlas reads compare.alignment=oaf")


@dataclass
class Subject:
    """One run at one checkpoint, loaded by the application."""

    run: str  # the run directory
    model_name: str
    checkpoint: int
    model: Any  # the network, eval mode, on the device
    # its das alignments file for this checkpoint (compare.site=atlas: its atlas's, the atlas
    # table beside it)
    alignments: Path


def compare(subjects: list[Subject], task, cfg: CompareConfig, device) -> dict:
    """The three comparison tables over every (ordered) pair of subjects of one task."""
    from study.analyses.compare.tables import build_tables
    if not subjects:
        raise UsageError("compare: no runs with das alignments")
    return build_tables(subjects, task, cfg, device)
