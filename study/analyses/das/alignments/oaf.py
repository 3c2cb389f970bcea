"""`oaf`: the orthogonal alignment of DAS (Geiger et al. 2024), a rotation whose first k
coordinates are interchanged (`OrthogonalAlignment`)."""
from study.analyses.das.alignments import AlignmentKind, register_alignment


def make(embed_dim: int, k: int, seed: int, laf_form: str = "sd"):
    import torch
    from study.analyses.das.alignment import OrthogonalAlignment
    torch.manual_seed(seed)
    return OrthogonalAlignment(embed_dim, k)


register_alignment(AlignmentKind("oaf", order=0, seed_index=0, make=make,
                                 help="orthogonal (a rotation)", label="OAF"))
