"""`random`: the control, an untrained seeded random rotation per k (`random_oaf`): the IIA
an alignment reaches with no training at all."""
from study.analyses.das.alignments import AlignmentKind, register_alignment


def make(embed_dim: int, k: int, seed: int, laf_form: str = "sd"):
    from study.analyses.das.alignment import random_oaf
    return random_oaf(embed_dim, k, seed)


register_alignment(AlignmentKind("random", order=3, seed_index=2, make=make,
                                 help="an untrained rotation, the control", label="random",
                                 trained=False, warm_start=False))
