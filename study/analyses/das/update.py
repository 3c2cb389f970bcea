"""What training and scoring an alignment share (`study/analyses/das/loop.py`,
`study/analyses/das/search.py`): the forward through pyvene with the cached source vectors,
the scored positions, the learning-rate schedule and the stopping rule's constants."""
from __future__ import annotations

import contextlib
import math

import torch

from study.analyses.common.interchange import PairTensors, scored_end
from study.analyses.das.alignment import cached_maps
from study.core.labels import IGNORE
from study.models.sites.pyvene_run import interchange_vectors

WINDOW = 20  # training batches averaged for early stopping [ours]
MIN_GAIN = 0.005  # windowed-IIA gain that resets the plateau count (`das.patience`) [ours]


def forward_iv(iv, pt: PairTensors, src: torch.Tensor,
               readout: torch.Tensor | None = None) -> torch.Tensor:
    """`forward` with a ready intervenable (any `site_intervenable` holding alignments, one
    `IntervenableModel.load` rebuilt too); with `readout`, a recurrent network starts each
    base at its step from `pt.base_states` where the pairs carry them (`with_base_states`)."""
    T = scored_end(pt.cf_labels, pt.base_pos)
    with contextlib.ExitStack() as stack:
        for inst in {id(i): i for i in iv.interventions.values()}.values():
            stack.enter_context(cached_maps(inst))  # each distinct alignment's maps, once
        return interchange_vectors(iv, pt.base_ids[:, :T], pt.base_pos, src,
                                   readout=None if readout is None else readout[:, :T],
                                   base_states=pt.base_states)


def scored_iv(iv, pt: PairTensors, src: torch.Tensor):
    """`scored` with a ready intervenable."""
    T = scored_end(pt.cf_labels, pt.base_pos)
    mask = pt.cf_labels[:, :T] != IGNORE  # (batch, T)
    return forward_iv(iv, pt, src, mask), pt.cf_labels[:, :T][mask], mask.nonzero()[:, 0]


def lr_factor(i: int, steps: int, floor: float) -> float:
    """Cosine decay from 1 to `floor` over `steps` updates [ours: the authors keep Adam's lr
    constant; the decay lets a long search settle instead of hopping between solutions]."""
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(i, steps) / max(steps, 1)))
