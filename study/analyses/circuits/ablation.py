"""Head ablation: silence one attention head and measure task accuracy, per stratum.

A head's output is its slice [h*d_head, (h+1)*d_head) of `sites.head[l]` (before the output
projection, so zeroing it removes exactly that head's contribution to the residual stream).
- `zero`: the slice is set to 0.
- `mean`: the slice is set to its mean over the evaluated sequences at each position
  [ours: position-wise mean ablation over the same sequences, the usual reference
  distribution when no separate one is named].
The ablation runs through pyvene like every intervention of the library: a `module_intervenable`
at `head[l]` holding an `AblateIntervention`, applied over the site's whole output
(`study.models.sites.pyvene_run.run_sourceless`).
Accuracy uses training's rule (every scored position's argmax among the task's output ids is
its label, `study/core/outputs.py` via `study.analyses.common.data.correct`); stratum values
read as the task labels them (`task.stratum_label`).
"""
from __future__ import annotations

import numpy as np
import torch

from study.analyses.common.data import correct
from study.models.sites.capture import batches, hooked, site_widths
from study.models.sites.pyvene_bridge import module_intervenable
from study.models.sites.pyvene_run import run_sourceless

METHODS = ("zero", "mean")


@torch.no_grad()
def accuracy_mask(model, task, ids: np.ndarray, labels: np.ndarray, device,
                  batch_size: int = 128, iv=None) -> np.ndarray:
    """(n,) bool: which sequences the model gets right (through the intervenable `iv`, an
    `ablator`, when given)."""
    out = []
    for s in batches(len(ids), batch_size):
        x = torch.as_tensor(ids[s], device=device)
        logits = (model(x) if iv is None else run_sourceless(iv, x)).float().cpu().numpy()
        out.append(correct(logits, labels[s], getattr(task, "output_ids", None)))
    return np.concatenate(out)


@torch.no_grad()
def head_means(model, ids: np.ndarray, device, batch_size: int = 128) -> dict[int, torch.Tensor]:
    """layer -> (pos, n_heads*d_head) mean of `sites.head[layer]` over the sequences."""
    sums: dict[int, torch.Tensor] = {}

    def add(layer):
        def fn(t):
            s = t.detach().float().sum(dim=0)
            sums[layer] = s if layer not in sums else sums[layer] + s
        return fn

    n_layers = len(model.sites.head)
    with hooked(model, "head", {layer: add(layer) for layer in range(n_layers)}):
        for s in batches(len(ids), batch_size):
            model(torch.as_tensor(ids[s], device=device))
    return {layer: v / len(ids) for layer, v in sums.items()}


def ablator(model, layer: int, head: int, d_head: int, method: str,
            means: dict[int, torch.Tensor] | None = None):
    """The pyvene intervenable with head `head` of `layer` zero- or mean-ablated at every
    position (`run_sourceless` runs it)."""
    from study.models.sites.pyvene_interventions import AblateIntervention

    if method not in METHODS:
        raise ValueError(f"ablation method {method!r}; known: {', '.join(METHODS)}")
    values = None if method == "zero" else means[layer]  # (pos, n_heads * d_head)
    inst = AblateIntervention(features=(head * d_head, (head + 1) * d_head), values=values)
    return module_intervenable(model, "head", layer, inst)


def by_stratum(task, ok: np.ndarray, strata: dict[str, np.ndarray]) -> list[tuple[str, float]]:
    """[("all", acc), ("depth=1", acc), ...] for a (n,) correctness mask."""
    rows = [("all", float(ok.mean()))]
    for name, values in strata.items():
        values = np.asarray(values)
        for v in np.unique(values):
            rows.append((task.stratum_label(name, v), float(ok[values == v].mean())))
    return rows


def ablation_rows(model, task, ids, labels, strata, device, n_heads: int,
                  methods=METHODS, batch_size: int = 128) -> list[tuple]:
    """Rows (layer, head, method, stratum, accuracy); the unablated model is layer = head = -1,
    method "none"."""
    rows = [(-1, -1, "none", s, a) for s, a in
            by_stratum(task, accuracy_mask(model, task, ids, labels, device, batch_size), strata)]
    means = head_means(model, ids, device, batch_size) if "mean" in methods else None
    n_layers = len(model.sites.head)
    d_head = site_widths(model)["head"] // n_heads
    for layer in range(n_layers):
        for head in range(n_heads):
            for method in methods:
                iv = ablator(model, layer, head, d_head, method, means)
                ok = accuracy_mask(model, task, ids, labels, device, batch_size, iv)
                rows += [(layer, head, method, s, a) for s, a in by_stratum(task, ok, strata)]
    return rows
