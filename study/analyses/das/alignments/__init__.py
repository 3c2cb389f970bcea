"""The DAS alignments, one module per kind, each registering itself
(`register_alignment(AlignmentKind(...))`): a new alignment is one file here. The registry
and what a kind says of itself are in `study/core/alignments.py`, where the reports read it
too; its functions are named here for the analysis's modules."""
from study.core.alignments import (AlignmentKind, control, get, kinds, names,
                                   register_alignment, trained)

__all__ = ["AlignmentKind", "control", "get", "kinds", "names", "register_alignment", "trained"]
