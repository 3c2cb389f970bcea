"""Interchange interventions by hand, through pyvene, on a run's network and its pairs.

What the `patching` and `das` analyses do, in the pieces a notebook or script puts together
itself (`examples/03_patch_one_site.ipynb` patches a site, `02_das_through_pyvene.ipynb`
trains an alignment):

    net, pairs = run.model(), run.pairs("up_down:count")
    iv = study.site_intervenable(net, "state")      # pyvene.IntervenableModel: a vanilla interchange
    logits = study.interchange(iv, pairs)           # (n, seq, vocab), each pair at its own position
    flips = study.all_right(logits, pairs.cf_labels, run.task)   # (n,) bool

    src = study.site_vectors(net, pairs, "state", of="source")   # (n, width), read once
    oaf = study.new_alignment("oaf", src, k=2)      # DAS's orthogonal alignment, standardised on src
    iv = study.site_intervenable(net, "state", oaf)
    loss = study.answer_loss(study.interchange(iv, pairs, sources=src), pairs.cf_labels, run.task)

Pairs are a task's `Pairs` (`Run.pairs`): numpy arrays of (base, source) sequences, their
labels, and the positions an intervention acts at (recurrent state: the step; transformer
sites: the token). A site is written as in the tables: "state", "resid[1]", "attn_out[0]".
Right and wrong, and the loss, are over the task's output ids only, the rule training and
every analysis score with (`study/core/outputs.py`).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from study.core.alignments import REFERENCE
from study.core.errors import UsageError
from study.core.sites import KINDS, parse_site_key


def _site(site: str) -> tuple[str, int]:
    """("state", 0) from "state", ("resid", 1) from "resid[1]"."""
    try:
        kind, layer, position = parse_site_key(str(site))
    except ValueError:
        kind, position = None, -1
    if kind not in KINDS or position != -1:
        raise UsageError(f"site={site!r}: write a site as the tables do, a kind ({', '.join(KINDS)}) "
                         f"with its layer for all but state: \"state\", \"resid[1]\"")
    return kind, layer


def site_intervenable(net, site: str = "state", intervention="patch"):
    """A `pyvene.IntervenableModel` over `net` (e.g. `run.model()`) acting at `site`, each
    example at its own position (`interchange`). `intervention`: "patch" (a vanilla
    interchange of the whole site vector), an alignment (`new_alignment`, `Run.alignment`), or
    a pyvene intervention class or instance that accepts per-step row masks at the state."""
    from study.models.sites.pyvene_bridge import site_intervenable as build

    kind, layer = _site(site)
    try:
        return build(net, kind, layer, intervention)
    except ValueError as e:  # no such site on this network, an unfit intervention
        raise UsageError(f"site_intervenable: {e}") from None


def _tensors(iv, pairs):
    """The pairs as tensors on the network's device, at the positions the intervenable acts
    at (aligned pairs: the answer position, or the alignment's own)."""
    from study.analyses.common.interchange import pair_tensors
    from study.models.sites.capture import device_of
    from study.models.sites.pyvene_bridge import where

    return pair_tensors(pairs, device_of(iv.model.net), where(iv).position)


def _index(rows, device):
    import torch
    return torch.as_tensor(rows, dtype=torch.long, device=device)


def interchange(iv, pairs, *, rows=None, sources=None, base_pos=None, source_pos=None):
    """Each base of `pairs` run through `iv` with its site, at the pair's base position, set
    from the source's, at its source position: logits (n, seq, vocab).

    rows: only these pairs (indices into `pairs`). sources: (n, width) source vectors read
    beforehand (`site_vectors(..., of="source")`, one per row), so the source sequences are
    not run again: a loop training an alignment reads them once. base_pos, source_pos: one
    position per pair of `pairs` to act at instead of the pair's own. Gradients reach a
    trainable intervention (an alignment); the network itself is frozen."""
    from study.models.sites.pyvene_run import interchange_ids, interchange_vectors

    pt = _tensors(iv, pairs)
    device = pt.base_ids.device
    if base_pos is not None:
        pt = replace(pt, base_pos=_index(base_pos, device).reshape(-1))
    if source_pos is not None:
        pt = replace(pt, source_pos=_index(source_pos, device).reshape(-1))
    if len(pt.base_pos) != len(pt) or len(pt.source_pos) != len(pt):
        raise UsageError(f"interchange: give one base_pos and source_pos per pair ({len(pt)})")
    if rows is not None:
        pt = pt.take(_index(rows, device))
    try:
        if sources is not None:
            if source_pos is not None:
                raise ValueError("source_pos says where to read the sources; sources= are "
                                 "read already")
            return interchange_vectors(iv, pt.base_ids, pt.base_pos, sources.to(device))
        return interchange_ids(iv, pt.base_ids, pt.source_ids, base_pos=pt.base_pos,
                               source_pos=pt.source_pos)
    except ValueError as e:  # positions out of range, sources of the wrong size
        raise UsageError(f"interchange: {e}") from None


def site_vectors(net, pairs, site: str = "state", *, of: str = "base"):
    """The site vector of each pair (without gradients): the base sequence's at its base
    position (of="base") or the source sequence's at its source position (of="source"):
    (n, width) float tensor."""
    if of not in ("base", "source"):
        raise UsageError(f"site_vectors: of={of!r}; choose from base, source")
    kind, layer = _site(site)
    return _vectors(net, pairs, kind, layer, -1, of)


def _vectors(net, pairs, kind: str, layer: int, position: int, of: str):
    """(n, width): each pair's vector at (kind, layer), at its own position (-1; aligned
    pairs: the answer position) or at `position`, on the base or the source sequence."""
    from study.analyses.common.interchange import pair_tensors
    from study.core.sites import check_site
    from study.models.sites.capture import device_of, gather_site

    try:
        check_site(net, kind, layer)
    except ValueError as e:
        raise UsageError(f"site {kind}[{layer}]: {e}") from None
    pt = pair_tensors(pairs, device_of(net), position)
    ids, pos = (pt.base_ids, pt.base_pos) if of == "base" else (pt.source_ids, pt.source_pos)
    return gather_site(net, ids, kind, layer, pos).float()


def new_alignment(name: str, vectors, k: int, seed: int = 0):
    """A fresh DAS alignment of width `vectors.shape[1]`, interchanging k coordinates, with
    its standardisation fitted on `vectors` (n, width) as the das analysis fits it on the
    sites' vectors [paper code: the authors standardise before the rotation]. name: a
    registered alignment (`study/analyses/das/alignments/`): "oaf" (orthogonal, Geiger et
    al.'s DAS), "laf" (linear, Grant et al. 2025, of the rotated form), "laf_sd" (the
    authors' form) or "random" (a fixed random rotation, the control). Pass it to
    `site_intervenable`; its parameters train."""
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.alignments import names

    if name not in names():
        raise UsageError(f"new_alignment: {name!r}; choose from {', '.join(names())}")
    if int(k) < 1 or int(k) > vectors.shape[1]:
        raise UsageError(f"new_alignment: k={k}; choose 1 to the site's width {vectors.shape[1]}")
    inst = make_alignment(name, int(vectors.shape[1]), int(k), int(seed), laf_form="rotated")
    inst.fit_standardisation(vectors.detach().cpu())
    return inst.to(vectors.device)


def all_right(logits, labels, task) -> np.ndarray:
    """(n,) bool: every scored position's answer (the argmax among the task's output ids) is
    its label; labels (n, seq) with IGNORE where unscored, e.g. `pairs.cf_labels` (the
    intervention worked) or `pairs.base_labels`."""
    import torch

    from study.core.outputs import Outputs

    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long, device=logits.device)
    return Outputs.of_task(task, logits.device).right(logits, labels[:, :logits.shape[1]]).cpu().numpy()


def answer_loss(logits, labels, task):
    """The cross entropy the das analysis trains an alignment on: the softmax over the task's
    output ids at every scored position of `labels` (n, seq), e.g. `pairs.cf_labels[rows]`.
    A scalar tensor that gradients flow back from."""
    import torch

    from study.core.outputs import Outputs

    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long, device=logits.device)
    labels = labels[:, :logits.shape[1]]
    return Outputs.of_task(task, logits.device).loss(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))


def coordinates(run, variable: str, pairs, alignment: str = REFERENCE, k: int | None = None,
                checkpoint="final") -> np.ndarray:
    """The variable's k aligned coordinates at each base of `pairs` (n, k): the run's trained
    alignment (`Run.alignment`, same arguments) read off the site it aligned, at the position
    it aligned (each pair's own). Two runs' coordinates on the same pairs are what the
    `compare` command's similarity measures take (`study.linear_cka`,
    `study.procrustes_similarity`)."""
    import torch

    from study.analyses.compare.projection import Subspace
    inst, kind, layer, position = run.alignment(variable, alignment, k, checkpoint=checkpoint)
    t = inst.saved_tensors()
    space = Subspace.from_matrix(t[""], int(t["/k"]), t["/mu"], t["/sigma"], t.get("/bias"))
    base = _vectors(run.model(checkpoint), pairs, kind, layer, position, "base")  # (n, width)
    with torch.no_grad():
        return space.read(base.cpu()).numpy()


def save_intervenable(iv, directory) -> None:
    """pyvene's own `IntervenableModel.save` into `directory` (made if missing), without its
    prints; `study.load_intervenable(directory, net)` reads it back."""
    from study.models.sites.pyvene_bridge import save_intervenable as save

    save(iv, directory)
