"""Analysis `atlas`: where a network holds each causal variable — Distributed Alignment
Search over every token role the task declares (`Task.roles`) at every layer of the site
kind, with the controls at every cell and a null that is the maximum the controls reach
anywhere on the grid [ours; Wu et al. 2025 trace a variable across token positions and
layers by patching; Grant et al. 2025 search a subspace at one site].

A cell is (variable, role, site): the variable's counterfactual pairs (`task.counterfactuals`,
`train` and `test` splits), each intervened at the role's position in the base and read at
the role's position in the source (`study/analyses/atlas/grid.py`). Where a pair's label
depends on where it is intervened (counting: the count set at one step decides what follows
it), the cell's pairs are drawn at the role instead (`Task.role_counterfactuals`), each
labelled for the intervention there [ours]. Binding's roles are each
line's letter, `=`, right-hand token and newline, the query letter and the `:`; counting's
the demonstration steps, the trigger and the responses. Sites: the recurrent state (one
layer) or the transformer's residual stream between layers, every layer (`atlas.layers`).

Two stages [ours: the grid is too large for the full search at every cell]:
1. screening, at every cell: one OAF at k = `screen_k`, `screen_steps` updates at a
   constant lr on the first `screen_pairs` training pairs, every cell of one network and one
   layer trained together in one DAS loop (one forward per update for all of them); and the
   same at every cell for the two controls of `das` (`study/analyses/das/controls.py`): the
   variable's values shuffled across pairs on the trained network, and the step-0
   (untrained) network, scored on the trained network's tested pairs;
2. full search, at the `top` cells of each variable by screening *training* IIA: the das
   search (`study/analyses/das/search.py`: OAF over the k ladder `k`, each k warm-started
   from the one before, `steps` updates, `restarts`), and both controls with the same
   search at those cells.

Table `atlas`, one row per cell and stage: checkpoint, model, seed (the run's), variable,
role, site, layer, stage (screen | full), k (the screen's; full: the smallest k whose
training IIA is within 0.01 of the best), iia, iia_lo, iia_hi (test IIA on tested pairs
and its 95 % Wilson interval, as das's), train_iia, n_tested, too_few, shuffled_iia and
step0_iia (the cell's controls at the same k and stage), then
- null: for the variable, the *maximum over the whole grid* (every role, layer and stage)
  of the shuffled and step-0 test IIA — what the controls reach anywhere; `null_from` says
  where (control, role, site, stage);
- credited: the cell's iia_lo is above the null (a cell is credited only where it beats
  what the controls reach anywhere on the grid), never where too_few;
- chance: the pair set's chance level (`study.analyses.common.stats.chance_iia`).
`alignments.safetensors` holds the full search's OAF of each variable's best cell at every k
of its ladder, keyed as das keys its own (`oaf/<variable>/<site>@pair/k=<k>`: the pairs at
the role's positions; the role is the table's full row's), so that comparisons can read each
network at its own best cell (`compare.site=atlas`).
Without a step-0 checkpoint (`ctx.model_at` None) the step-0 control is left out of the
null, with a warning.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting
from study.analyses.atlas.roles import asked_roles


@dataclass(frozen=True)
class AtlasConfig:
    variables: tuple[str, ...] = setting(
        ("all",), "all = every causal variable of the task; main = its headline variables; "
        "or names (a joint variable only by name), as das.variables")
    roles: tuple[str, ...] = setting(
        (), "() = every token role the task declares (Task.role_names: binding letter, eq, "
        "rhs, newline, query_letter, colon; counting demo, trigger, response); a role name "
        "takes every occurrence of it (rhs: each line's), or one occurrence (rhs@3)")
    sites: tuple[str, ...] = setting((), "() = state (recurrent) or resid (transformers)")
    layers: tuple[int, ...] = setting((), "() = every layer of the site kind")
    n_train: int = setting(2000, "training pairs of the full searches")
    n_test: int = setting(500, "test pairs of every cell")
    screen_pairs: int = setting(512, "[ours] training pairs of the screening pass")
    screen_k: int = setting(4, "[ours] the one k the screening pass searches at")
    screen_steps: int = setting(150, "[ours] updates of the screening pass")
    screen_batch: int = setting(16, "[ours] pairs per update and cell, screening")
    screen_lr: float = setting(1e-2, "[ours] the screening pass's constant Adam lr")
    top: int = setting(1, "[ours] cells per variable the full search runs at, the best by "
                          "screening training IIA (each costs about as much as the screening "
                          "of every cell of one variable on the binding GRU at small)")
    k: tuple[int, ...] = setting((1, 2, 4, 8, 16), "the full search's k ladder")
    steps: int = setting(500, "the full search's alignment updates")
    batch_size: int = setting(64, "pairs per update, full search")
    lr: float = setting(5e-3, "the full search's Adam lr (cosine decay to lr * 0.05)")
    restarts: int = setting(1, "the full search's trainings per k, the best by training IIA")
    min_changed: int = setting(
        50, "[ours] fewer tested test pairs than this at a cell: too_few, not scored")
    eval_batch_size: int = setting(
        1000, "pairs per forward pass when scoring IIA and reading the sites (das)",
        runtime=True)
    seed: int = setting(0, "added to the run's seed: pairs and alignment initialisation")

    def __post_init__(self):
        def bad(key, value, allowed):
            raise UsageError(f"atlas.{key}={value}: {allowed}")

        from study.core.sites import KINDS
        for s in self.sites:
            if s not in KINDS:
                bad("sites", ",".join(self.sites), f"choose from {', '.join(KINDS)}")
        if any(layer < 0 for layer in self.layers):
            bad("layers", ",".join(map(str, self.layers)), "layers are >= 0")
        if not self.k or min(self.k) < 1:
            bad("k", ",".join(map(str, self.k)), "give one or more integers >= 1")
        for key in ("n_train", "n_test", "screen_pairs", "screen_k", "screen_batch",
                    "batch_size", "restarts", "min_changed", "top"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")
        for key in ("screen_steps", "steps"):
            if getattr(self, key) < 0:
                bad(key, getattr(self, key), "must be >= 0")
        for key in ("screen_lr", "lr"):
            if not getattr(self, key) > 0:
                bad(key, getattr(self, key), "must be positive")
        if self.eval_batch_size < 1:
            raise UsageError(f"runtime.eval_batch_size={self.eval_batch_size}: must be at "
                             f"least 1")


def check(cfg: AtlasConfig, task_cls, model_entry, model_config) -> None:
    """Before training: the variables are the task's, the roles its declared ones, the sites
    and layers the model's."""
    from study.analyses.das.analysis import DasConfig, asked_variables
    from study.analyses.das.analysis import check as das_check
    asked_variables(cfg.variables, task_cls)
    asked_roles(cfg.roles, task_cls)
    try:
        das_check(DasConfig(variables=cfg.variables, sites=cfg.sites, layers=cfg.layers,
                            k=cfg.k), task_cls, model_entry, model_config)
    except UsageError as e:
        raise UsageError(str(e).replace("das.", "atlas.")) from None


@register("analysis", "atlas", config=AtlasConfig, check=check, presets={
    # [ours] the full budget above is the small scale's (das's `small` preset: n_train 2000,
    # 500 steps, lr 5e-3, batch 64, the ladder 1..16, one restart)
    "smoke": {"variables": ("main",), "n_train": 48, "n_test": 32, "screen_pairs": 32,
              "screen_k": 2, "screen_steps": 3, "screen_batch": 8, "top": 1, "k": (2,), "steps": 3,
              "batch_size": 16, "min_changed": 2, "eval_batch_size": 64},
})
def run(ctx):
    """DAS over every (token role, layer) of the grid for the task's variables, screened at
    every cell with both controls, the full search at the best cells; the null is the
    controls' maximum over the grid (table `atlas`)."""
    from study.analyses.atlas.build import atlas_rows
    from study.analyses.das.alignment import save_alignments
    from study.core.tables import ATLAS
    saved: dict = {}
    rows = atlas_rows(ctx, saved)
    if ctx.out_dir is not None:  # None: tables only (a caller that writes nothing)
        save_alignments(saved, ctx.out_dir, ctx.checkpoint)
    return {"atlas": ATLAS.frame(rows)}
