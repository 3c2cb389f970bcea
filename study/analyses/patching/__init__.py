"""Analysis `patching`: counterfactual activation patching over (layer x position), time
step, and attention head.

For every counterfactual kind of the task (binding: root_value, distractor, query), n pairs
are drawn from the test split [paper, Wu et al. 2025: patching succeeds when the output
switches to the counterfactual answer]. Each site is patched with the source's activation:
- transformers: the residual stream `resid[l]` entering every layer l (l = n_layers is the
  final stream) at every position, and with the `heads` capability each head of
  `head[l]` (its d_head features of the pre-projection head outputs) at every position;
- recurrent models: the state `state[t]` after every token t (the position is the step).
Aligned pairs (base_pos = -1) are patched position by position; pairs with explicit
positions (counting) are patched once per site, source_pos into base_pos (position -1).

Tables (long format; names and columns declared in `study/core/tables.py`):
- `patching`: checkpoint, site, layer, position, head, counterfactual, metric, value,
  value_all, n_pairs, n_changed, n_tested; metric in flip_rate | logit_diff |
  norm_logit_diff (see `study/analyses/patching/sweep.py`). `value` is over the *tested*
  pairs: those whose base the network, run without a patch, answers with the base label and
  not the counterfactual one (n_tested of them); flip_rate's value_all is over all pairs;
  n_changed counts the pairs whose answer the causal model says must change (`Pairs.changed`,
  a superset of the tested),
  head = -1 for non-head sites, layer = 0 for `state`; site "none" rows hold the unpatched
  base's flip rate.
- `head_ranking`: checkpoint, counterfactual, metric, layer, head, value, rank: each head's
  effect summed over positions (logit_diff, flip_gain), rank 1 = strongest.
- `positions`: checkpoint, counterfactual, position, token: the tokens of the first base
  sequence of each kind, to label the positions of heatmaps.
- `patching_roles` [ours] (tasks with token roles, `Task.pair_roles`; empty otherwise):
  checkpoint, site, layer, head, role, counterfactual, stratum, metric, value, value_all,
  n_pairs, n_changed, n_tested. The same patches and metrics, each pair patched at its *own*
  position of a role (binding: `root`, ..`hop1`, `query_letter`, `answer`, along the query's
  chain, `study/tasks/binding/roles.py`), scored over the pairs that have the role: Wu et
  al. (2025) follow the value along the chain's tokens, which sit at different absolute
  positions in each program. Read off the position sweep's per-pair outcomes (no extra
  forward pass); stratum "all" and per value of the task's `pair_role_strata` (binding:
  "depth=3"); site "none" rows hold the unpatched base's flip rate over the same pairs
  (`study/analyses/patching/roles.py`).
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.sites import KINDS
from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting


@dataclass(frozen=True)
class PatchingConfig:
    n_pairs: int = setting(1000, "pairs per counterfactual kind [ours]")
    kinds: tuple[str, ...] = setting((), "counterfactual kinds; () = all of the task's")
    sites: tuple[str, ...] = setting((), "() = resid (+ head with the heads capability), or state")
    split: str = setting("test", "split the pairs are drawn from")
    batch_size: int = setting(256, "pairs per recording chunk, and rows per patched forward")
    seed: int = setting(0, "pair-sampling seed, added to the run's seed")

    def __post_init__(self):
        if self.n_pairs < 1:
            raise UsageError(f"patching.n_pairs={self.n_pairs} must be at least 1")
        if self.batch_size < 1:
            raise UsageError(f"patching.batch_size={self.batch_size} must be at least 1")
        for s in self.sites:
            if s not in KINDS:
                raise UsageError(f"patching.sites={','.join(self.sites)}: {s!r} is not a site "
                                 f"kind; choose from {', '.join(KINDS)}")


def check(cfg: PatchingConfig, task_cls, model_entry, model_config) -> None:
    """Before training: the asked kinds are the task's, the asked sites the model's."""
    from study.analyses.common.context import check_sites, chosen
    chosen("patching.kinds", cfg.kinds, task_cls.counterfactual_kinds,
           f"a counterfactual kind of {task_cls.name}")
    check_sites("patching.sites", cfg.sites, model_entry)


@register("analysis", "patching", config=PatchingConfig, check=check, presets={
    "small": {"n_pairs": 200, "batch_size": 128},
    "smoke": {"n_pairs": 8, "batch_size": 64},
})
def run(ctx):
    """Counterfactual activation patching per (layer x position), time step, and head."""
    from study.analyses.common.context import chosen
    from study.analyses.common.interchange import pair_tensors
    from study.core.tables import HEAD_RANKING, PATCHING, PATCHING_ROLES, POSITIONS
    from study.analyses.patching.roles import RoleOutcomes, role_rows
    from study.analyses.patching.sweep import head_ranking, sweep, tables
    from study.core.sites import default_sites

    cfg, model, task = ctx.config, ctx.model, ctx.task
    kinds = chosen("patching.kinds", cfg.kinds, task.counterfactual_kinds,
                   f"a counterfactual kind of {task.name}")
    sites = default_sites(model, cfg.sites, heads=True, setting="patching")
    rows, positions, by_role = [], [], []
    for kind in kinds:
        pairs = task.counterfactuals(kind, cfg.n_pairs, split=cfg.split, seed=ctx.seed + cfg.seed)
        positions += [(ctx.checkpoint, kind, p, task.vocab[int(t)])
                      for p, t in enumerate(pairs.base_ids[0])]
        pt = pair_tensors(pairs, ctx.device, outputs=task)
        roles = task.pair_roles(pairs) if pt.aligned else {}
        at_roles = RoleOutcomes(roles) if roles else None
        acc, ref = sweep(model, pt, sites, model.n_heads, cfg.batch_size, at_roles)
        rows += tables(acc, ref, kind, pt.aligned, ctx.checkpoint)
        if at_roles is not None:
            strata = {s: pairs.strata[s] for s in task.pair_role_strata if s in pairs.strata}
            by_role += role_rows(at_roles, kind, ctx.checkpoint, strata, task.stratum_label)
    patching = PATCHING.frame(rows)
    return {PATCHING.name: patching, HEAD_RANKING.name: head_ranking(patching, ctx.checkpoint),
            POSITIONS.name: POSITIONS.frame(positions),
            PATCHING_ROLES.name: PATCHING_ROLES.frame(by_role)}

