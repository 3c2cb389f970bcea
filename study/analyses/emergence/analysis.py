"""Analysis `emergence`: when, along training, a network comes to hold each causal variable
where it holds it at the end [ours; Wu et al. 2025 follow the binding mechanism of one
transformer through its accuracy phases, Exoo et al. 2026 the phases of one model; here any
family, at the cell the atlas found].

For each variable, the cell (token role, site, layer) where the run's `atlas`
(`study/analyses/atlas/`) holds it best at the analysed checkpoint — the variable's first
`full` row there, the one whose OAF the atlas saved — at that row's k (where the atlas ran
no full search of it, every cell having too few tested pairs: its screened cell of the best
training IIA, at the screen's k); or the cell the settings name (`emergence.role`, `site`,
`layer`, `k`). The variable's pairs at that cell are searched at every logged checkpoint up
to the analysed one (or `checkpoints` of them, log-spaced), walking backwards: the analysed
checkpoint's search starts from the atlas's saved OAF, each earlier one's from the later
checkpoint's fit (`study/analyses/emergence/walk.py`), `steps` updates each, fewer than a
cold search needs [ours: so the cost grows sub-linearly with the checkpoints; `python -m
study bench emergence` measures it]. Without the atlas's OAF (the cell from settings, or
alignments of another checkpoint) the first search is cold, `first_steps` updates.

Table `emergence`, one row per (variable, scored checkpoint): checkpoint (the analysed
one), step (the scored one), variable, role, site, layer, k; iia, iia_lo, iia_hi (test IIA
on the tested pairs, judged on the analysed network at every step, and its 95 % Wilson
interval, as das's), train_iia; shuffled_iia (the variable's values shuffled across pairs,
searched at this checkpoint at the atlas's screening size); null (the atlas's null for the
variable: the controls' maximum over its whole grid; with the cell from settings, the
highest shuffled_iia of the walk); n_tested, too_few. When the IIA's lower bound first
stays above the null: `study.claims.emergence.appears_at`.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import setting


@dataclass(frozen=True)
class EmergenceConfig:
    variables: tuple[str, ...] = setting(
        ("atlas",), "atlas = every variable the run's atlas searched; or all, main or names, "
                    "as das.variables")
    role: str = setting("", "\"\" = each variable's atlas cell; or a token role (with site, "
                            "layer and k): that cell, and no atlas needed")
    site: str = setting("", "the cell's site kind, with role")
    layer: int = setting(-1, "the cell's layer, with role")
    k: int = setting(0, "0 = the atlas row's k; with role: the k searched (required)")
    checkpoints: int = setting(0, "0 = every logged checkpoint up to the analysed one; N = N "
                                  "of them, log-spaced, the first and the analysed included")
    steps: int = setting(150, "[ours] updates of each warm-started search")
    first_steps: int = setting(500, "[ours] updates of a cold search (the first checkpoint "
                                    "where no atlas alignment starts it)")
    n_train: int = setting(2000, "training pairs")
    n_test: int = setting(500, "test pairs")
    batch_size: int = setting(64, "pairs per update")
    lr: float = setting(5e-3, "Adam lr, cosine decay to lr * lr_floor")
    lr_floor: float = setting(0.05, "the lr's floor, a share of lr")
    stop_iia: float = setting(0.995, "a search stops once its windowed training IIA reaches this")
    screen_pairs: int = setting(512, "training pairs of the shuffled control")
    screen_steps: int = setting(150, "updates of the shuffled control (the atlas's screening)")
    screen_batch: int = setting(16, "pairs per update, shuffled control")
    screen_lr: float = setting(1e-2, "constant lr of the shuffled control")
    min_changed: int = setting(50, "fewer tested test pairs than this: too_few, not scored")
    eval_batch_size: int = setting(1000, "pairs per forward when scoring and reading",
                                   runtime=True)
    seed: int = setting(0, "added to the run's seed: pairs and initialisation")

    def __post_init__(self):
        def bad(key, value, allowed):
            raise UsageError(f"emergence.{key}={value}: {allowed}")

        if self.role and (not self.site or self.layer < 0 or self.k < 1):
            bad("role", self.role, "with a role give its site, layer (>= 0) and k (>= 1) too")
        if not self.role and (self.site or self.layer >= 0):
            bad("site" if self.site else "layer", self.site or self.layer,
                "a cell from settings needs emergence.role too")
        for key in ("n_train", "n_test", "batch_size", "screen_pairs", "screen_batch",
                    "min_changed", "eval_batch_size"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")
        for key in ("checkpoints", "steps", "first_steps", "screen_steps", "k"):
            if getattr(self, key) < 0:
                bad(key, getattr(self, key), "must be >= 0")
        for key in ("lr", "screen_lr"):
            if not getattr(self, key) > 0:
                bad(key, getattr(self, key), "must be positive")
        if not 0 < self.lr_floor <= 1:
            bad("lr_floor", self.lr_floor, "must be in (0, 1]")
        if not 0 < self.stop_iia <= 1:
            bad("stop_iia", self.stop_iia, "must be in (0, 1]")


def check(cfg: EmergenceConfig, task_cls, model_entry, model_config) -> None:
    """Before training: named variables are the task's; a cell from settings names a role
    the task declares and a site the model has."""
    from study.analyses.atlas.roles import asked_roles
    from study.analyses.das.analysis import DasConfig, asked_variables
    from study.analyses.das.analysis import check as das_check
    if cfg.variables != ("atlas",):
        asked_variables(cfg.variables, task_cls)
    if cfg.role:
        try:
            asked_roles((cfg.role,), task_cls)
            das_check(DasConfig(variables=("all",), sites=(cfg.site,), layers=(cfg.layer,),
                                k=(cfg.k,)), task_cls, model_entry, model_config)
        except UsageError as e:
            raise UsageError(str(e).replace("das.", "emergence.")
                             .replace("atlas.roles", "emergence.role")) from None


def needs(cfg: EmergenceConfig) -> tuple[str, ...]:
    """The atlas, unless the settings name the cell."""
    return () if cfg.role else ("atlas",)


@register("analysis", "emergence", config=EmergenceConfig, check=check, needs=needs, presets={
    "smoke": {"n_train": 48, "n_test": 32, "steps": 3, "first_steps": 3, "batch_size": 16,
              "screen_pairs": 32, "screen_steps": 3, "screen_batch": 8, "min_changed": 2,
              "eval_batch_size": 64},
})
def run(ctx):
    """Each variable's IIA at its atlas cell at every logged checkpoint, each search warm
    started from the later checkpoint's (table `emergence`)."""
    from study.analyses.emergence.build import emergence_rows
    from study.core.tables import EMERGENCE
    return {"emergence": EMERGENCE.frame(emergence_rows(ctx))}
