"""`python -m study bench das`: DAS training steps per second, our loop against pyvene's.

Both loops train the same OAF (`study/analyses/das/alignment.OrthogonalAlignment`, a pyvene
`RotatedSpaceIntervention`) on the same pairs of the task's first causal variable, at the
`das` analysis's default site, batch 128, Adam, fp32:
- `pyvene`: the tutorial-style loop. An `IntervenableModel` (`study/models/sites/pyvene_bridge`)
  runs the source forward and the base forward at every step, on full-length inputs.
- `cached`: the `das` analysis's loop (`study/analyses/das/loop.py`), through pyvene too: source
  vectors read once (their one-off cost is `setup_s`) and handed to the `IntervenableModel`
  as `source_representations`, then one base forward per step, inputs cut after the last
  scored position, the output layer run at the scored positions only (`readout`), the
  rotation computed once per step.
At the recurrent `state` site pyvene needs one module (time step) per call, so both loops
use the pairs whose base position is the most common one. The model is built untrained
(speed does not depend on the weights).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from study.run.build import frozen
from study.train.runtime import sync


def bench_das(task, model_entry, model_config, steps: int = 30, device: str = "auto",
              batch_size: int = 128, n_pairs: int = 2048, seed: int = 0):
    """Steps/s of both loops and their ratio, as a DataFrame (one row per loop)."""
    import pandas as pd

    from study.analyses.das.alignment import OrthogonalAlignment
    from study.analyses.das.loop import Batch, Member
    from study.analyses.das.search import site_data
    from study.analyses.common.interchange import pair_tensors
    from study.models.base import build_model
    from study.models.sites.pyvene_bridge import module_intervenable
    from study.models.sites.pyvene_run import interchange_ids
    from study.models.sites import default_sites

    from study.train.runtime import resolve_device
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = frozen(build_model(model_entry, model_config, len(task.vocab), task.seq_len), dev)
    kind, layer = default_sites(model, every_layer=False)[0]  # das's default site
    variable = task.causal_variables[0]
    pairs = task.counterfactuals(variable, n_pairs, split="train", seed=seed)
    probe = pair_tensors(pairs, "cpu")
    if kind == "state":  # pyvene: one intervenable per time step
        modal = int(np.bincount(probe.base_pos.numpy()).argmax())
        keep = np.flatnonzero(probe.base_pos.numpy() == modal)
        pairs = type(pairs)(pairs.kind, *(getattr(pairs, f)[keep] for f in (
            "base_ids", "source_ids", "base_labels", "cf_labels", "base_pos", "source_pos")))
        index = modal
    else:
        index = layer
    batch_size = min(batch_size, len(pairs.base_ids))

    # ours: cached sources
    t0 = time.perf_counter()
    data = site_data(model, pairs, pairs, kind, layer, -1, dev, outputs=task)
    sync(dev)
    setup = time.perf_counter() - t0
    width = data.src_train.shape[1]
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randperm(len(data.train), generator=g)[:batch_size]
               for _ in range(steps + 2)]
    inst = OrthogonalAlignment(width, min(4, width)).to(dev)
    batch = Batch(model, data, [Member(inst, seed, lr=1e-3)], steps + 2)  # the das loop's
    for i, idx in enumerate(batches):
        if i == 2:
            sync(dev)
            t0 = time.perf_counter()
        batch.update([0], idx.to(dev))
    sync(dev)
    ours = time.perf_counter() - t0

    # pyvene: source forward every step
    inst = OrthogonalAlignment(width, min(4, width)).to(dev)
    iv = module_intervenable(model, kind, index, inst)
    opt = torch.optim.Adam([p for p in inst.parameters() if p.requires_grad], lr=1e-3)
    pt = data.train
    for i, idx in enumerate(batches):
        if i == 2:
            sync(dev)
            t0 = time.perf_counter()
        idx = idx.to(dev)
        bpos, spos = pt.base_pos[idx], pt.source_pos[idx]
        logits = interchange_ids(iv, pt.base_ids[idx], pt.source_ids[idx],
                                 base_pos=[[int(p)] for p in bpos],
                                 source_pos=[[int(p)] for p in spos])
        loss = pt.outputs.loss(logits.flatten(0, 1), pt.cf_labels[idx].flatten())  # as the das loop
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync(dev)
    theirs = time.perf_counter() - t0

    site = kind if kind == "state" else f"{kind}[{layer}]"
    rows = [dict(loop="pyvene (source forward every step)", site=site, device=str(dev),
                 batch_size=batch_size, steps=steps, setup_s=0.0, seconds=theirs,
                 steps_per_s=steps / theirs, speedup=1.0),
            dict(loop="cached sources (das analysis)", site=site, device=str(dev),
                 batch_size=batch_size, steps=steps, setup_s=setup, seconds=ours,
                 steps_per_s=steps / ours, speedup=theirs / ours)]
    return pd.DataFrame(rows)
