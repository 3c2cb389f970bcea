"""Analysis `circuits`: what each attention head does, and what the task loses without it.

Table `circuits` (checkpoint, layer, head, score, value); head -1 = all heads of the layer
together (summed pattern or summed weight matrices). Scores:
- every attention model (`study/analyses/scores.py`): `prev_token` (mean attention to
  the previous token on task sequences), `induction` (on repeated random tokens),
  `attn_to_<target>` — mean attention mass from the task's query positions onto its targets
  (`task.attention_targets(ids)`; e.g. binding `chain`, `root`, `query_line` from `:` and
  the hop roles `hop<h>` (hop h read where the letter is read: the query's letter and `:`
  for h = 1, the copying chain line's right-hand side and newline after) and
  `hop<h>_at_query` (hop h >= 2 read at `:`), h from 1 to max_depth or the deepest
  chain; `tasks/binding/views.py`;
  assign_add `operands`, `values` from `=`, `prev_var` from assigned numbers; counting
  `trigger`, `demos`, `bos` from the response positions).
- Exoo et al.'s progress measures, where the task gives their facts
  (`task.progress_measures()`, `tasks/base.ProgressMeasures`; assign_add does), every
  attention model: the top-k attention criteria (`attn_num_to_prev`, `attn_eq_to_operands`,
  `attn_eq_to_values`: fraction of query rows whose top-1 / top-2 attention is exactly the
  target; the paper reads them at layers 0, 0 and 1, with head -1) and the probes
  (`probe_var_from_num`, layer 0: a linear probe's test accuracy for the variable name from
  the residual after layer-0 attention at assigned numbers).
- models with the `weights_view` capability (W_E/W_Q/.../W_U matrices: `attn2`;
  `study/analyses/circuits/attn2_views.py`): `ov_copy_frac`,
  `qk_prev_pos`; with the task's facts also `qk_num_to_prev_var`, `qk_var_identity`,
  `ov_mlp_accuracy`, `fourier_frac` + `fourier_freq_<i>`, `cos_premlp_ov` and its shuffled
  baseline `cos_premlp_ov_shuffled`.

With `trajectory=true` the table also holds every other logged checkpoint's scores (not the
ablation), so that the report draws the progress measures along training [ours].

Table `ablation` (checkpoint, layer, head, method, split, stratum, accuracy): each head
zero- and mean-ablated (`study/analyses/circuits/ablation.py`), task accuracy on each split overall
(stratum "all") and per stratum value ("depth=3", "pool=var1_seen_allowed", "count=7");
the unablated model is layer = head = -1, method "none".
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import fixed, setting

_METHODS = ("zero", "mean")


@dataclass(frozen=True)
class CircuitsConfig:
    split: str = setting("test", "task split the attention scores are read on and the "
                                 "ablated accuracy is measured on")
    n_examples: int = setting(1000, "sequences drawn from it, for the scores and the ablation")
    n_induction: int = setting(256, "repeated random sequences for the induction score")
    induction_len: int = fixed(0, "T tokens repeated once: half the task's seq_len")
    ablation: tuple[str, ...] = setting(("zero", "mean"), "ablation methods (empty: no ablation)")
    fourier_top_k: int = fixed(5, "frequencies counted by `fourier_frac` [paper]")
    batch_size: int = setting(128, "sequences per forward pass (circuits)",
                              runtime="eval_batch_size")
    trajectory: bool = setting(False, "also score every logged checkpoint (no ablation there): "
                                      "the progress measures along training")

    # settings folded into another: the ablation reads the scores' split and sequences
    retired: ClassVar[dict[str, str]] = {"ablation_splits": "split", "n_ablation": "n_examples"}

    def __post_init__(self):
        bad = [m for m in self.ablation if m not in _METHODS]
        if bad:
            raise UsageError(f"circuits.ablation={','.join(self.ablation)}: choose among "
                             f"{', '.join(_METHODS)}")
        for key in ("n_examples", "n_induction"):
            if getattr(self, key) < 1:
                raise UsageError(f"circuits.{key}={getattr(self, key)} must be at least 1")
        if self.batch_size < 1:
            raise UsageError(f"runtime.eval_batch_size={self.batch_size} must be at least 1")


@register("analysis", "circuits", config=CircuitsConfig, requires=("attention", "heads"), presets={
    "small": {"n_examples": 500},
    "smoke": {"n_examples": 48, "n_induction": 16},
})
def run(ctx) -> dict:
    """Per-head attention scores, QK/OV and Fourier views, and head ablation by stratum."""
    from study.analyses.circuits import attn2_views, scores
    from study.analyses.circuits.ablation import ablation_rows
    from study.analyses.common.data import sample
    from study.core.tables import ABLATION, CIRCUITS

    cfg, task, model, dev = ctx.config, ctx.task, ctx.model, ctx.device
    ids, labels, strata = sample(task, cfg.split, cfg.n_examples, ctx.seed)
    T = cfg.induction_len or task.seq_len // 2

    def score_rows(net) -> list[tuple]:
        rows = scores.task_head_scores(net, task, ids, dev, cfg.batch_size)
        rows += scores.induction_rows(net, task, cfg.n_induction, T, dev, cfg.batch_size,
                                      ctx.seed)
        if "weights_view" in net.capabilities:
            rows += attn2_views.generic_rows(net, task.pad_id)
            rows += attn2_views.progress_rows(net, task, ids, dev, cfg.fourier_top_k)
        for score, variable in task.progress_measures().probes.items():
            rows.append(_progress_probe(net, task, ids, score, variable, dev, ctx.seed))
        return rows

    at = {ctx.checkpoint: score_rows(model)}
    if cfg.trajectory and ctx.model_at is not None:
        for step in ctx.steps:
            if step >= ctx.checkpoint:  # the trajectory up to the analysed weights
                continue
            try:
                at[step] = score_rows(ctx.model_at(step))
            except LookupError as e:  # a damaged checkpoint: the trajectory has a gap
                warnings.warn(f"circuits.trajectory: step {step} left out ({e})")
    circuits = CIRCUITS.frame((step, *r) for step in sorted(at) for r in at[step])

    abl = []
    if cfg.ablation:
        n_heads = model.n_heads
        for layer, head, method, stratum, acc in ablation_rows(
                model, task, ids, labels, strata, dev, n_heads, cfg.ablation, cfg.batch_size):
            abl.append((ctx.checkpoint, layer, head, method, cfg.split, stratum, acc))
    return {CIRCUITS.name: circuits, ABLATION.name: ABLATION.frame(abl)}


def _progress_probe(model, task, ids, score: str, variable: str, device, seed: int) -> tuple:
    """(0, -1, score, test accuracy) [paper probe_l1_var_from_num]: the residual after
    layer-0 attention (resid[0] + attn_out[0]) at each position where the task's probe
    `variable` is defined (assign_add: each assigned number, for the index of its variable),
    probed for it; 70 / 30 split of the sequences."""
    import numpy as np

    from study.analyses.probes.fit import fit_probe
    from study.models.sites.capture import collect

    acts = collect(model, ids, [("resid", 0), ("attn_out", 0)], device)
    x = acts[("resid", 0)] + acts[("attn_out", 0)]  # (n, pos, d)
    y = task.probe_variables(ids)[variable]  # (n, pos)
    order = np.random.default_rng(seed).permutation(len(ids))
    cut = int(0.7 * len(ids))
    parts = []
    for idx in (order[:cut], order[cut:]):
        seq, pos = np.nonzero(y[idx] >= 0)
        parts.append((x[idx[seq], pos], y[idx[seq], pos]))
    if min(len(parts[0][1]), len(parts[1][1])) == 0:
        return (0, -1, score, float("nan"))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):  # see analyses/probes/fit.probe_site
        _, test_acc = fit_probe(parts[0][0], parts[0][1], parts[1][0], parts[1][1], max_iter=500)
    return (0, -1, score, test_acc)
