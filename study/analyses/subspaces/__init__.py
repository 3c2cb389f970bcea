"""Analysis `subspaces`: does a variable's DAS subspace stay put while one network trains?

Reads the alignments the `das` analysis saved in this run (`RUN/analyses/das/alignments*.
safetensors`, keys `<alignment>/<variable>/<site>/k=<k>`), turns each into a basis of its
interchanged k-dimensional subspace (`analyses/subspaces/geometry.alignment_basis`,
`subspaces.space`) and compares the analysed checkpoint's subspaces with those of the run's
other checkpoints by their principal angles (`principal_cosines`): `mean_cos_angle` is the
mean cosine of the k principal angles (1: the same subspace; k/d expected of random subspaces
in d dims), `min_cos_angle` the cosine of the largest angle (1 only if the subspaces coincide).

Principal angles need shared coordinates, which only checkpoints of one run have: across seeds
and architectures the bases are unrelated and angles mean nothing. Those comparisons are the
basis-free ones of `analyses/compare` (`python -m study compare RUN...`: CKA, Procrustes, CCA
of the projected activations, and cross-model interchange), so this analysis reads no other
run.

Only sites of equal width are compared, and only the same (alignment, variable, k) at the
same site label (e.g. `resid[1]@pair`; `match_sites`, fixed). The
`random` alignment's rows (an untrained rotation per checkpoint) give the chance level.

Table `subspaces`: checkpoint, variable, site, alignment, k, other_run, other_checkpoint,
other_site, mean_cos_angle, min_cos_angle (`other_run` is this run's directory).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import fixed, setting

_log = logging.getLogger(__name__)

_SPACES = ("write", "read", "standardised")


@dataclass(frozen=True)
class SubspacesConfig:
    space: str = setting(
        "write",
        "basis of a subspace: write | read | standardised (see _subspace_math)")
    match_sites: bool = fixed(True, "compare only equal site labels")
    alignments: tuple[str, ...] = setting((), "alignments compared (empty: all that were saved)")

    def __post_init__(self):
        if self.space not in _SPACES:
            raise UsageError(f"subspaces.space={self.space!r}: choose from {', '.join(_SPACES)}")


@register("analysis", "subspaces", config=SubspacesConfig)  # the same at every scale
def run(ctx) -> dict:
    """Principal angles between a variable's DAS subspaces at this run's checkpoints."""
    from pathlib import Path

    from study.analyses.subspaces.geometry import alignment_files, principal_cosines, read_alignments
    from study.core.tables import SUBSPACES

    cfg = ctx.config
    own_dir = Path(ctx.out_dir).parent.parent
    own = alignment_files(own_dir)
    mine = [f for step, f in own if step == ctx.checkpoint]
    if not mine and len(own) == 1 and own[0][0] is None:
        _log.info(f"subspaces: {own[0][1]} does not say its checkpoint; taken as step "
                  f"{ctx.checkpoint}")
        mine = [own[0][1]]
    if not mine:
        raise UsageError(f"subspaces: no das alignments for checkpoint {ctx.checkpoint} in "
                         f"{own_dir / 'analyses' / 'das'}; run `analyze {own_dir} analysis=das "
                         f"checkpoint={ctx.checkpoint}` first")
    others = [(str(own_dir), s, f) for s, f in own if s is not None and s != ctx.checkpoint]
    if not others:
        _log.info(f"subspaces: only checkpoint {ctx.checkpoint} of {own_dir} has das alignments; "
                  f"run das on another checkpoint to compare")

    bases = {}
    for f in mine:
        bases.update(read_alignments(f, cfg.space))
    rows = []
    for other_run, other_step, f in others:
        theirs = read_alignments(f, cfg.space)
        for (align, var, site, k), A in bases.items():
            if cfg.alignments and align not in cfg.alignments:
                continue
            for (o_align, o_var, o_site, o_k), B in theirs.items():
                if (o_align, o_var, o_k) != (align, var, k) or A.shape[0] != B.shape[0]:
                    continue
                if cfg.match_sites and o_site != site:
                    continue
                cos = principal_cosines(A, B)
                rows.append((ctx.checkpoint, var, site, align, k, other_run, other_step, o_site,
                             float(cos.mean()), float(cos.min())))
    return {SUBSPACES.name: SUBSPACES.frame(rows)}
