"""How long a run's analyses, and a sweep's comparisons, take on this CPU: counted in the
network passes each makes, priced from the run's own training step.

A training step of `batch_size` examples is one forward and one backward (about twice the
forward's arithmetic) and an update: a forward of one example costs about a third of the step
over the batch (`FORWARD_SHARE`). Each analysis is costed as the passes it makes:

- `das`: each restart of each trained alignment kind makes `das.steps` updates at each k of its ladder and of its two
  controls' (the shuffled-variable and the step-0 search), at each searched site and variable;
  an update is a forward and a backward of `das.batch_size` rows for each member, priced as
  `DAS_ROW` of a training step of that many rows (calibrated on measured runs, early stops
  included); reading the sites' vectors is a forward of each pair.
- `patching`: one forward of each pair's base and source, then a patched forward per
  (pair, site, position) up to the answer, for each kind of counterfactual (at most: a
  position the source leaves unchanged is skipped).
- `atlas`: at each site (every layer of the site kinds) and variable, the screening pass's
  `screen_steps` updates of `screen_batch` rows for every role's cell, its shuffled control
  and its step-0 control, then `top` full searches with both controls over the ladder,
  each update priced as das's; reading the pairs is a forward of each pair on both networks.
- `emergence`: at each scored checkpoint (every logged one, or `emergence.checkpoints`) and
  variable (the atlas's, or the asked ones), `steps` updates of `batch_size` rows warm-started
  (`first_steps` for a cold first search without the atlas) and the shuffled control's
  `screen_steps` of `screen_batch`, each priced as das's, and a read of the pairs.
- `probes`, `circuits`, `subspaces`: forwards over the examples they read.
- the comparisons at a sweep's end (`compare`): for each pair of runs and variable, the
  stitched and shuffled forwards over its test pairs and the fit, and each run's geometry.

Every number is an estimate made before the work starts; the run's `times.json` holds what
each stage took.
"""
from __future__ import annotations

from dataclasses import dataclass

FORWARD_SHARE = 1 / 3  # [ours] a forward's share of a training step's time, per example
# [ours] what a DAS update's row costs against a training step's row: the network is frozen
# (no weight gradients), the forward starts at the site, the sources are cached and the
# early stop ends many searches early. Calibrated on the 15 runs of
# results/binding-2026-11-28 (each run's wall time less its training time against this
# model: 0.34-0.85, the median 0.46); a run that trains free-running (counting's GRU and
# LSTM) has a slower training step than its DAS forward, and is overestimated (about 3x)
DAS_ROW = 0.45
READ_EXAMPLES = 4_000  # [ours] examples a probe or circuit analysis runs forward, per layer


@dataclass(frozen=True)
class Parts:
    """Seconds of a run's work on this CPU, by part."""
    training: float
    analyses: dict  # name -> seconds

    @property
    def total(self) -> float:
        return self.training + sum(self.analyses.values())


def forward_s(cfg, step_s: float) -> float:
    """Seconds of one example's forward, from `step_s` seconds for a training step."""
    return step_s / cfg.train.batch_size * FORWARD_SHARE


def _layers(cfg) -> int:
    return int(getattr(cfg.model_config, "n_layers", 1))


def _sites(cfg, recurrent: bool, heads: bool) -> int:
    """Patching's default sites: the state, or every residual stream (+ every head)."""
    if recurrent:
        return 1
    layers = _layers(cfg)
    return layers + 1 + (layers * int(getattr(cfg.model_config, "n_heads", 1)) if heads else 0)


def das_seconds(cfg, task, step_s: float) -> float:
    """The run's `das`: every batch at every k, each update priced by `DAS_ROW`."""
    from study.core.alignments import trained
    das = cfg.analysis_configs["das"]
    variables = das.variables
    if not variables or variables[0] in ("all", "main"):
        variables = task.causal_variables if variables and variables[0] == "all" \
            else (task.main_variables or task.causal_variables[:1])
    sites = max(1, len(das.layers)) * max(1, len(das.sites)) * max(1, len(das.positions))
    ladders = len(das.k) + (2 * len(_control_ks(das)) if das.controls else 0)
    # every restart of every trained kind, however the loop batches them (a kind's restarts
    # in one forward on the CPU: the same rows)
    members = len([a for a in das.alignments if a in trained()]) * max(1, das.restarts)
    per_k = das.steps * members * das.batch_size * 3 * forward_s(cfg, step_s) * DAS_ROW
    read = (das.n_train + das.n_test) * 2 * forward_s(cfg, step_s)  # sources and bases
    return len(variables) * sites * (ladders * per_k + read * (2 if das.controls else 1))


def _variables(asked, task) -> tuple:
    if not asked or asked[0] in ("all", "main"):
        return (task.causal_variables if asked and asked[0] == "all"
                else (task.main_variables or task.causal_variables[:1]))
    return tuple(asked)


def atlas_seconds(cfg, task, step_s: float, recurrent: bool) -> float:
    """The run's `atlas`: the screening pass at every (role, site) cell with both controls,
    then the full searches at the best cells, each update priced as das's (`DAS_ROW`)."""
    from study.analyses.atlas.roles import roles_of
    atlas = cfg.analysis_configs["atlas"]
    fwd = forward_s(cfg, step_s)
    # the grid's roles as the atlas takes them (`study.analyses.atlas.roles`, torch-free)
    roles = max(1, len(roles_of(atlas.roles, task.roles(task.split("test").ids[:1]))))
    if recurrent:
        sites = 1
    else:
        kinds = atlas.sites or ("resid",)
        sites = sum(len(atlas.layers) if atlas.layers else _layers(cfg) + (k == "resid")
                    for k in kinds)
    update = 3 * fwd * DAS_ROW  # one row's forward and backward through the intervention
    screen = sites * atlas.screen_steps * 3 * roles * atlas.screen_batch * update
    full = atlas.top * 3 * len(atlas.k) * atlas.steps * atlas.batch_size * update
    read = 2 * 2 * (atlas.screen_pairs + atlas.n_test + atlas.top * (atlas.n_train
                                                                      + atlas.n_test)) * fwd
    return len(_variables(atlas.variables, task)) * (screen + full + read)


def emergence_seconds(cfg, task, step_s: float) -> float:
    """The run's `emergence`: each variable's warm-started search and shuffled control at
    each scored checkpoint, each update priced as das's (`DAS_ROW`), and the pairs read."""
    e = cfg.analysis_configs["emergence"]
    fwd = forward_s(cfg, step_s)
    checkpoints = cfg.train.checkpoints + 1  # and step 0
    if e.checkpoints:
        checkpoints = min(checkpoints, e.checkpoints)
    if e.variables != ("atlas",):
        variables = len(e.variables)
    elif "atlas" in cfg.analysis_configs:
        variables = len(_variables(cfg.analysis_configs["atlas"].variables, task))
    else:
        variables = len(task.causal_variables)
    update = 3 * fwd * DAS_ROW
    first = 0 if "atlas" in cfg.analysis_configs and not e.role else e.first_steps - e.steps
    per = ((e.steps * e.batch_size + e.screen_steps * e.screen_batch) * update
           + 2 * 2 * (e.n_train + e.n_test) * fwd)
    return variables * (checkpoints * per + max(0, first) * e.batch_size * update)


def _control_ks(das) -> list[int]:
    """The k the controls climb (`study/analyses/das/controls.control_ks`, any width; that
    module imports pyvene, which takes seconds)."""
    top = max(das.k) if das.control_k == "all" else int(das.control_k)
    return [k for k in das.k if k <= top] or sorted(das.k)[:1]


def patching_seconds(cfg, task, step_s: float, recurrent: bool, heads: bool) -> float:
    """The most the run's `patching` takes."""
    p = cfg.analysis_configs["patching"]
    kinds = len(p.kinds) if p.kinds else len(getattr(task, "counterfactual_kinds", ()) or (1,))
    sites = len(p.sites) * _layers(cfg) if p.sites else _sites(cfg, recurrent, heads)
    rows = p.n_pairs * (2 + sites * task.seq_len)
    return kinds * rows * forward_s(cfg, step_s)


def analysis_seconds(cfg, task, step_s: float) -> dict:
    """Each asked analysis's seconds on this CPU, from `step_s` seconds a training step."""
    from study.core import registry
    caps = registry.get("model", cfg.model).capabilities
    out = {}
    for name in cfg.analyses:
        if name == "das":
            out[name] = das_seconds(cfg, task, step_s)
        elif name == "patching":
            out[name] = patching_seconds(cfg, task, step_s, "recurrent" in caps, "heads" in caps)
        elif name == "atlas":
            out[name] = atlas_seconds(cfg, task, step_s, "recurrent" in caps)
        elif name == "emergence":
            out[name] = emergence_seconds(cfg, task, step_s)
        else:
            out[name] = READ_EXAMPLES * (_layers(cfg) + 1) * forward_s(cfg, step_s)
    return out


def compare_seconds(cfgs_steps: list[tuple[object, float]], compare) -> float:
    """The comparisons at a sweep's end over runs (config, seconds a training step) asking for
    DAS: each pair of runs' stitching (fit and test pairs, the shuffled baselines) and each
    run's value geometry, per variable."""
    runs = [(c, s) for c, s in cfgs_steps if "das" in c.analyses]
    if len(runs) < 2:
        return 0.0
    per_pair = compare.n_fit + compare.n_test * (2 + compare.n_perm)
    total = 0.0
    for i, (a, sa) in enumerate(runs):
        total += 2 * compare.n_geometry * forward_s(a, sa)
        for b, sb in runs[i + 1:]:
            total += per_pair * (forward_s(a, sa) + forward_s(b, sb))
    variables = max(len(c.analysis_configs["das"].variables) for c, _ in runs)
    return total * max(1, variables)
