"""`laf`: the linear alignment of Grant et al. (2025) as our search trains it: of form
`das.laf_form` (`sd`: the authors' class; `rotated`: a rotation times a learned linear map),
warm-started from the previous k, with the search's lr and its decay."""
from study.analyses.das.alignments import AlignmentKind, register_alignment


def make(embed_dim: int, k: int, seed: int, laf_form: str = "sd"):
    import torch
    from study.analyses.das.alignment import LAF_CLASSES
    torch.manual_seed(seed)
    return LAF_CLASSES[laf_form](embed_dim, k)


register_alignment(AlignmentKind("laf", order=1, seed_index=1, make=make,
                                 help="linear, of form laf_form, our search", label="LAF"))
