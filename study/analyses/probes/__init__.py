"""Analysis `probes`: linear probes for the task's causal variables at every site.

For each variable the task offers (`task.probe_variables(ids, labels)`) and each site —
the residual stream entering every layer at every position for transformers
(`sites.resid[l]`, layer = l, l = n_layers is the final stream), the recurrent state after
every token for RNNs (`sites.state[t]`, layer 0, position = t) — a logistic-regression probe
is fitted on some sequences and scored on others (`study/analyses/probes/fit.py`). Position -1 is a
probe fitted on every position of the site at once. Each probe has a control (`control` =
True): the same probe fitted to the variable's labels permuted across all (sequence,
position) cells, which breaks the activation-label link at every position and for the
pooled probe; it scores the chance rate of the label distribution, the accuracy a probe
reaches with no information in the representation (`fit.shuffled`).

Table `probes`: checkpoint, variable, site, layer, position, split (train | test), accuracy,
control (bool), converged (bool: False where lbfgs stopped at `max_iter`; the analysis then
prints one line to stderr, "warning: N of M probes did not converge within max_iter=...").
[paper] Wu et al. report that linear probes recover only ≈31 % of binding's
variable values; Exoo et al. probe the variable name from layer-1 number tokens
(`var_of_num` here, also the circuits analysis' `probe_var_from_num`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from study.core.sites import KINDS, STEP_KINDS
from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import fixed, setting

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbesConfig:
    split: str = setting("test", "task split the probe sequences are drawn from")
    n_examples: int = setting(
        2000,
        "sequences drawn (uniformly, without replacement) from the split")
    test_fraction: float = fixed(0.3, "share of those sequences the probes are scored on")
    variables: tuple[str, ...] = setting(
        (),
        "variables to probe (empty: every one the task offers)")
    sites: tuple[str, ...] = setting(
        ("resid", "state"),
        "site kinds probed where the model has them")
    layers: tuple[int, ...] = setting((), "site indices (layers) to probe (empty: all)")
    positions: tuple[int, ...] = setting((), "token positions to probe (empty: all)")
    max_positions: int = setting(
        0, "at most this many of those positions, spread evenly from the first to the last "
        "(0: every one)")
    pooled: bool = setting(True, "also fit one probe on every position of a site (position -1)")
    C: float = setting(1.0, "inverse L2 strength of the logistic regression (scikit-learn's C)")
    max_iter: int = setting(200, "lbfgs iterations per probe")
    max_pooled: int = setting(
        20_000,
        "cap on (sequence, position) samples of a pooled probe per split")
    min_train: int = fixed(8, "fewer defined training labels than this: no probe at that "
                              "position")
    min_test: int = fixed(4, "likewise for test labels")
    n_jobs: int = setting(
        0, "probes fitted in parallel processes: -1 one per core; 0 = auto: one per core when "
        "the network runs on a GPU (the CPU is then free), else 1", runtime="probe_jobs")
    batch_size: int = setting(256, "sequences per forward pass (probes)",
                              runtime="eval_batch_size")

    def __post_init__(self):
        if self.n_examples < 4:
            raise UsageError(f"probes.n_examples={self.n_examples} must be at least 4")
        bad = [s for s in self.sites if s not in KINDS]
        if bad or not self.sites:
            raise UsageError(f"probes.sites={','.join(self.sites)}: choose among "
                             f"{', '.join(KINDS)}")
        if self.C <= 0:
            raise UsageError(f"probes.C={self.C} must be positive")
        for key in ("max_iter", "max_pooled", "batch_size"):
            if getattr(self, key) < 1:
                spelt = "runtime.eval_batch_size" if key == "batch_size" else f"probes.{key}"
                raise UsageError(f"{spelt}={getattr(self, key)} must be at least 1")
        if self.max_positions < 0:
            raise UsageError(f"probes.max_positions={self.max_positions} must be 0 (every "
                             f"position) or at least 1")
        if self.n_jobs < -1:
            raise UsageError(f"runtime.probe_jobs={self.n_jobs} must be -1, 0 (auto) or a "
                             f"number of processes")
        if any(p < 0 for p in self.positions) or any(layer < 0 for layer in self.layers):
            raise UsageError("probes.positions and probes.layers must be non-negative")


def spread(positions: list[int], most: int) -> list[int]:
    """At most `most` of `positions` (0: all), evenly spaced, the first and the last kept."""
    if not most or len(positions) <= most:
        return positions
    if most == 1:
        return positions[-1:]
    picks = {round(i * (len(positions) - 1) / (most - 1)) for i in range(most)}
    return [positions[i] for i in sorted(picks)]


def check(cfg: ProbesConfig, task_cls, model_entry, model_config) -> None:
    """Before training: at least one asked site kind is the model's; the asked variables are
    the task's (`probe_variable_names`)."""
    from study.analyses.common.context import chosen
    from study.core.network import declared_kinds
    have = declared_kinds(model_entry.capabilities)
    if not set(cfg.sites) & set(have):
        raise UsageError(f"probes.sites={','.join(cfg.sites)}: model {model_entry.name} has "
                         f"sites {', '.join(have)}")
    chosen("probes.variables", cfg.variables, task_cls.probe_variable_names,
           f"a variable of task {task_cls.name}")


@register("analysis", "probes", config=ProbesConfig, check=check, presets={
    "small": {"n_examples": 1000},
    # max_iter stays 200 at smoke: at 50, 2-20 % of the smoke models' probes stopped
    # unconverged; six positions (and the pooled probe) exercise every code path
    "smoke": {"n_examples": 96, "max_pooled": 2000, "max_positions": 6},
})
def run(ctx) -> dict:
    """Linear probes (and shuffled-label controls) for each causal variable at each site."""
    import numpy as np

    from study.analyses.probes.fit import not_converged_line, probe_site, shuffled
    from study.analyses.common.data import sample
    from study.analyses.common.context import chosen
    from study.core.tables import PROBES
    from study.models.sites.capture import grouped_collect

    cfg, task, model = ctx.config, ctx.task, ctx.model
    ids, labels, _ = sample(task, cfg.split, cfg.n_examples, ctx.seed)
    rng = np.random.default_rng(ctx.seed)
    variables = task.probe_variables(ids, labels)  # name -> (n, pos)
    variables = {v: variables[v] for v in chosen(
        "probes.variables", cfg.variables, tuple(variables), f"a variable of task {task.name}")}
    controls = {v: shuffled(vals, [ctx.seed, i]) for i, (v, vals) in enumerate(variables.items())}
    order = rng.permutation(len(ids))
    n_test = max(1, int(round(cfg.test_fraction * len(ids))))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])

    kinds = model.sites.kinds()
    sites = []
    for kind in cfg.sites:
        if kind in STEP_KINDS and kind in kinds:
            sites.append((kind, 0))
        elif kind in kinds and kind not in STEP_KINDS:
            sites += [(kind, i) for i in range(kinds[kind]) if not cfg.layers or i in cfg.layers]
    if not sites:
        raise UsageError(f"probes.sites={','.join(cfg.sites)}: model {ctx.model_name} has sites "
                         f"{', '.join(kinds)}")
    positions = spread(list(cfg.positions) or list(range(ids.shape[1])), cfg.max_positions)
    jobs = cfg.n_jobs or (-1 if getattr(ctx.device, "type", str(ctx.device)) == "cuda" else 1)
    rows = []
    for acts in grouped_collect(model, ids, sites, ctx.device, cfg.batch_size):
        for (kind, layer), x in acts.items():
            for var, pos, control, split, acc, converged in probe_site(
                    x, variables, train, test, positions, pooled=cfg.pooled, controls=controls,
                    min_train=cfg.min_train, min_test=cfg.min_test, max_pooled=cfg.max_pooled,
                    C=cfg.C, max_iter=cfg.max_iter, seed=ctx.seed, n_jobs=jobs):
                rows.append((ctx.checkpoint, var, kind, layer, pos, split, acc, control,
                             converged))
    fits = [r[-1] for r in rows if r[5] == "test"]  # one test row per fitted probe
    if not all(fits):
        _log.warning(not_converged_line(fits.count(False), len(fits), cfg.max_iter))
    return {PROBES.name: PROBES.frame(rows)}
