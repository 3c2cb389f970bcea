"""`laf_sd`: the authors' LAF trained as they train it [paper code: grantsrb/mas]: form sd,
their initialisation, Adam at their constant lr (1e-3, `laf_sd_lr`, fixed), every k from a
fresh draw (no warm start)."""
from study.analyses.das.alignments import AlignmentKind, register_alignment


def make(embed_dim: int, k: int, seed: int, laf_form: str = "sd"):
    import torch
    from study.analyses.das.alignment import LinearAlignment
    torch.manual_seed(seed)
    return LinearAlignment(embed_dim, k)  # always the authors' form, whatever laf_form


register_alignment(AlignmentKind("laf_sd", order=2, seed_index=3, make=make,
                                 help="the authors' linear alignment trained as they train it: form sd, their "
                                 "initialisation, constant lr laf_sd_lr, each k from a fresh "
                                 "draw",
                                 label="LAF (authors')", warm_start=False, lr_setting="laf_sd_lr"))
