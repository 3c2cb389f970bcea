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

from study.core.errors import UsageError
from study.core.registry import register

SITE_KINDS = ("resid", "attn_out", "mlp_out", "head", "state")
ALIGNMENTS = ("oaf", "laf", "random")


@dataclass(frozen=True)
class DasConfig:
    variables: tuple[str, ...] = ()  # () = every causal variable of the task
    sites: tuple[str, ...] = ()  # () = state (recurrent) or resid (transformers)
    layers: tuple[int, ...] = ()  # () = 0 for state, n_layers // 2 for resid
    positions: tuple[int, ...] = (-1,)  # -1 = the pair's positions (answer position if aligned)
    alignments: tuple[str, ...] = ALIGNMENTS
    k: tuple[int, ...] = (1, 2, 4, 16, 32)  # [paper]
    n_train: int = 10_000  # [paper]
    n_test: int = 1_000  # [paper]
    batch_size: int = 128  # [paper]
    lr: float = 1e-3  # [paper] Adam
    steps: int = 20_000  # [paper code: grantsrb/mas configs, num_training_steps]
    stop_iia: float = 0.995  # [paper code: upper_acc_thresh] early stop on training IIA
    patience: int = 0  # [ours] stop after this many updates without a training-IIA gain; 0 = off
    standardize: bool = True  # [paper, Grant et al.] standardise the site before the alignment
    max_cond: float = 1e5  # [ours] LAF with cond(A) above this is refused (IIA NaN)
    eval_batch_size: int = 1000
    seed: int = 0  # added to the run's seed: pairs and alignment initialisation

    def __post_init__(self):
        def bad(key, value, allowed):
            raise UsageError(f"das.{key}={value}: {allowed}")

        for s in self.sites:
            if s not in SITE_KINDS:
                bad("sites", ",".join(self.sites), f"choose from {', '.join(SITE_KINDS)}")
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


@register("analysis", "das", config=DasConfig, presets={
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

    from analyses.das.alignment import save_alignments
    from analyses.das.search import search, site_data
    from analyses.common.context import chosen

    cfg, model, task = ctx.config, ctx.model, ctx.task
    variables = chosen("das.variables", cfg.variables, task.causal_variables,
                       f"a causal variable of {task.name}")
    sites = default_sites(model, cfg)
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


def default_sites(model, cfg) -> list[tuple[str, int]]:
    """(kind, layer) pairs to search: the configured ones or the paper's defaults."""
    counts = model.sites.kinds()
    kinds = cfg.sites or (("state",) if "state" in counts else ("resid",))
    out = []
    for kind in kinds:
        if kind not in counts:
            raise UsageError(f"das.sites: the model has no {kind!r} sites; it has "
                             f"{', '.join(sorted(counts))}")
        if kind == "state":
            if cfg.layers and set(cfg.layers) != {0}:
                raise UsageError(f"das.layers={','.join(map(str, cfg.layers))}: state sites "
                                 f"have one layer, 0 (the position is the time step)")
            out.append(("state", 0))
            continue
        n = counts[kind] - 1 if kind == "resid" else counts[kind]  # resid has n_layers + 1
        layers = cfg.layers or ((n // 2,) if kind == "resid" else (counts[kind] // 2,))
        for layer in layers:
            if layer >= counts[kind]:
                raise UsageError(f"das.layers: {kind}[{layer}] does not exist; the model has "
                                 f"{counts[kind]} {kind} sites (0..{counts[kind] - 1})")
            out.append((kind, layer))
    return out
