"""Analysis `das`: Distributed Alignment Search for the task's causal variables, with an
orthogonal (OAF), a linear (LAF) and a random-subspace control alignment, k swept.

For each causal variable of the task (`task.causal_variables`), train pairs come from the
`train` split and test pairs from `test` (`task.counterfactuals(variable, n, split, seed)`).
At each chosen site the model stays frozen; the alignment maps the (standardised) site
vector, the first k dims come from the source and the rest from the base, and it is mapped
back (`analyses/das/alignment.py`). OAF and LAF are trained (`analyses/das/search.py`); the
random control is a fixed random rotation, never trained.

Sites (defaults [paper, Grant et al. 2025], override with das.sites / das.layers / das.positions):
- recurrent models: the state after the pair's token (`state`, layer 0, position -1:
  base_pos in the base, source_pos in the source);
- transformers: the residual stream between layers, `resid[n_layers // 2]` (between the two
  layers of a 2-layer model), at the pair's positions; aligned pairs (base_pos = -1) use the
  answer position (the last scored position) in both. An explicit position p >= 0 means
  position p in base and source and applies to aligned pairs only.

Table `das`: checkpoint, variable, site, layer, position, alignment, k, split, iia
(alignment oaf | laf | random; split train | test; position -1 = the pair's positions;
iia NaN where a LAF's cond(A) exceeds `max_cond` and its inverse is not trusted).
Learned alignments go to `alignments.safetensors` under `<alignment>/<variable>/<site>/k=<k>`
(the matrix: R for OAF/random, W for LAF; suffix keys /mu /sigma /k and, for LAF, /core
/signs /bias); `analyses.das.alignment.load_alignment(path, key)` rebuilds one. The file holds
the latest analysed checkpoint (metadata "checkpoint"); an earlier checkpoint's file is kept
as `alignments-<step>.safetensors`.
"""
from __future__ import annotations

from dataclasses import dataclass

from models.sites import KINDS
from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting

ALIGNMENTS = ("oaf", "laf", "random")


@dataclass(frozen=True)
class DasConfig:
    variables: tuple[str, ...] = setting((), "() = every causal variable of the task")
    sites: tuple[str, ...] = setting((), "() = state (recurrent) or resid (transformers)")
    layers: tuple[int, ...] = setting((), "() = 0 for state, n_layers // 2 for resid")
    positions: tuple[int, ...] = setting(
        (-1,),
        "-1 = the pair's positions (answer position if aligned)")
    alignments: tuple[str, ...] = setting(
        ALIGNMENTS, "oaf (orthogonal), laf (linear), random (an untrained rotation, the control)")
    k: tuple[int, ...] = setting(
        (1, 2, 4, 16, 32), "subspace sizes swept: dims taken from the source [paper]")
    n_train: int = setting(10_000, "counterfactual pairs the alignment is trained on [paper]")
    n_test: int = setting(1_000, "pairs IIA is tested on [paper]")
    batch_size: int = setting(128, "pairs per alignment update [paper]")
    lr: float = setting(1e-3, "[paper] Adam")
    steps: int = setting(
        20_000, "alignment updates [paper code: grantsrb/mas configs, num_training_steps]")
    stop_iia: float = setting(0.995, "[paper code: upper_acc_thresh] early stop on training IIA")
    patience: int = setting(
        0,
        "[ours] stop after this many updates without a training-IIA gain; 0 = off")
    standardize: bool = setting(True, "[paper, Grant et al.] standardise the site before the alignment")
    max_cond: float = setting(1e5, "[ours] LAF with cond(A) above this is refused (IIA NaN)")
    eval_batch_size: int = setting(1000, "pairs per forward pass when scoring IIA")
    seed: int = setting(0, "added to the run's seed: pairs and alignment initialisation")

    def __post_init__(self):
        def bad(key, value, allowed):
            raise UsageError(f"das.{key}={value}: {allowed}")

        for s in self.sites:
            if s not in KINDS:
                bad("sites", ",".join(self.sites), f"choose from {', '.join(KINDS)}")
        for a in self.alignments:
            if a not in ALIGNMENTS:
                bad("alignments", ",".join(self.alignments), f"choose from {', '.join(ALIGNMENTS)}")
        if not self.alignments:
            bad("alignments", "", "give at least one of " + ", ".join(ALIGNMENTS))
        if not self.k or min(self.k) < 1:
            bad("k", ",".join(map(str, self.k)), "give one or more integers >= 1")
        if any(layer < 0 for layer in self.layers):
            bad("layers", ",".join(map(str, self.layers)), "layers are >= 0")
        if not self.positions or min(self.positions) < -1:
            bad("positions", ",".join(map(str, self.positions)), "-1 (the pair's) or p >= 0")
        for key in ("n_train", "n_test", "batch_size", "eval_batch_size"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")
        if self.steps < 0:
            bad("steps", self.steps, "must be >= 0")
        if not self.lr > 0:
            bad("lr", self.lr, "must be positive")
        if self.patience < 0:
            bad("patience", self.patience, "must be 0 (off) or positive")
        if not 0 < self.stop_iia <= 1:
            bad("stop_iia", self.stop_iia, "must be in (0, 1]")
        if not self.max_cond > 1:
            bad("max_cond", self.max_cond, "must be greater than 1")


def check(cfg: DasConfig, task_cls, model_entry, model_config) -> None:
    """Before training: the asked variables are the task's, the asked sites and layers the
    model's (the same rules `default_sites` applies to the built network)."""
    from analyses.common.context import check_sites, chosen
    from models.sites import declared_kinds
    chosen("das.variables", cfg.variables, task_cls.causal_variables,
           f"a causal variable of {task_cls.name}")
    check_sites("das.sites", cfg.sites, model_entry)
    kinds = cfg.sites or (("state",) if "state" in declared_kinds(model_entry.capabilities) else ("resid",))
    n_layers = getattr(model_config, "n_layers", None)
    for kind in kinds:
        if kind == "state" and cfg.layers and set(cfg.layers) != {0}:
            raise UsageError(f"das.layers={','.join(map(str, cfg.layers))}: state sites have "
                             f"one layer, 0 (the position is the time step)")
        count = None if n_layers is None else n_layers + 1 if kind == "resid" else n_layers
        if kind != "state" and count is not None and cfg.layers and max(cfg.layers) >= count:
            raise UsageError(f"das.layers: {kind}[{max(cfg.layers)}] does not exist; model "
                             f"{model_entry.name} has {count} {kind} sites (0..{count - 1})")


@register("analysis", "das", config=DasConfig, check=check, presets={
    "paper": {},
    # [ours] minutes per variable on a CPU: fewer, larger Adam steps than the paper's
    "small": {"n_train": 2000, "n_test": 500, "steps": 300, "lr": 5e-3, "batch_size": 64,
              "patience": 60, "k": (1, 2, 4, 16)},
    "smoke": {"n_train": 64, "n_test": 32, "steps": 5, "batch_size": 32, "k": (2,),
              "eval_batch_size": 64},
})
def run(ctx):
    """Distributed Alignment Search (OAF, LAF, random control) for the task's variables."""
    import pandas as pd

    from analyses.common.context import chosen
    from analyses.das.alignment import save_alignments
    from analyses.das.search import search, site_data
    from models.sites import default_sites

    cfg, model, task = ctx.config, ctx.model, ctx.task
    variables = chosen("das.variables", cfg.variables, task.causal_variables,
                       f"a causal variable of {task.name}")
    sites = default_sites(model, cfg.sites, cfg.layers, every_layer=False, setting="das")
    seed = ctx.seed + cfg.seed
    rows, saved = [], {}
    from tqdm.auto import tqdm
    bar = tqdm(total=len(variables) * len(sites) * len(cfg.positions) * len(cfg.k)
               * len(cfg.alignments), desc="das", unit="alignment", disable=None)
    for v_i, variable in enumerate(variables):
        train_pairs = task.counterfactuals(variable, cfg.n_train, split="train", seed=seed)
        test_pairs = task.counterfactuals(variable, cfg.n_test, split="test", seed=seed)
        for kind, layer in sites:
            for position in cfg.positions:
                try:
                    data = site_data(model, train_pairs, test_pairs, kind, layer, position,
                                     ctx.device, cfg.eval_batch_size)
                except ValueError as e:  # e.g. an explicit position for explicit pairs
                    raise UsageError(f"das at {kind}[{layer}] for {variable}: {e}") from None
                # [ours] alignment initialisations differ between checkpoints (the pairs do
                # not), so subspaces compared across checkpoints do not agree by construction
                init = (seed * 1_000_003 + ctx.checkpoint) * 1009 + v_i
                r, s = search(model, data, variable, position, cfg, init,
                              ctx.checkpoint, progress=bar)
                rows += r
                saved.update(s)
    bar.close()
    save_alignments(saved, ctx.out_dir, ctx.checkpoint)
    cols = ["checkpoint", "variable", "site", "layer", "position", "alignment", "k", "split", "iia"]
    return {"das": pd.DataFrame(rows, columns=cols)}


