"""`python -m study bench emergence`: what following one variable along training costs
(`study/analyses/emergence/`) against one full search of the atlas at the same cell.

On untrained networks of the asked family and scale (the cost does not depend on the
weights: one draw per checkpoint), one variable (the task's first asked by `atlas.variables`)
at one cell (the last role the pairs hold at the first site, as `bench atlas` takes it) and k
(`emergence.k`, else the atlas's `screen_k`):
- `full`: the atlas's full search there with both its controls (OAF over the `atlas.k`
  ladder), what the atlas spends on each variable's best cell at the final checkpoint;
- `emergence`: the walk over `emergence.checkpoints` checkpoints (10 unless given), each
  search `emergence.steps` updates from the later one's alignment (the first from an OAF
  standing in for the atlas's saved one) with its shuffled control.
An untrained network never reaches `emergence.stop_iia`, so every search runs its whole
budget: on trained networks, where a warm start often stops early, the walk costs at most
this. `ratio` is the walk's cost over the full search's; the atlas spends that full search
per variable besides its screening of the whole grid, so a ratio of 2 is at most twice one
final-checkpoint atlas. `seconds` is wall time, `cpu_s` the process's CPU time (every
thread's), the figure to read on a shared machine.
"""
from __future__ import annotations

import time

import torch

from study.run.build import frozen


def bench_emergence(task, model_entry, model_config, atlas_cfg, cfg, device: str = "cpu",
                    seed: int = 0):
    """The two stages' seconds and their ratio as a DataFrame."""
    import pandas as pd

    from study.analyses.atlas.build import _full
    from study.analyses.atlas.roles import roles_of
    from study.analyses.common.context import AnalysisContext
    from study.analyses.das.alignment import make_alignment
    from study.analyses.das.analysis import asked_variables
    from study.analyses.emergence.walk import Cell, walk
    from study.core.sites import default_sites
    from study.models.base import build_model
    from study.models.sites.capture import site_widths
    from study.train.runtime import resolve_device

    dev = resolve_device(device)
    n = cfg.checkpoints or 10
    nets = []
    for s in range(n):
        torch.manual_seed(seed + s)
        nets.append(frozen(build_model(model_entry, model_config, len(task.vocab),
                                       task.seq_len), dev))
    variable = asked_variables(atlas_cfg.variables, task)[0]
    kind, layer = default_sites(nets[0], atlas_cfg.sites, atlas_cfg.layers, every_layer=True,
                                setting="atlas")[0]
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    train = task.counterfactuals(variable, atlas_cfg.n_train, split="train", seed=seed)
    test = task.counterfactuals(variable, atlas_cfg.n_test, split="test", seed=seed)
    role = _last_held(task, roles_of(atlas_cfg.roles, task.roles(task.split("test").ids[:1])),
                      train, test)
    _full(nets[0], nets[-1], task, variable, train, test, role, kind, layer, atlas_cfg, seed,
          0, dev)
    rows.append(dict(stage="full", checkpoints=1, seconds=time.perf_counter() - t0,
                     cpu_s=time.process_time() - c0))

    steps = list(range(n - 1, -1, -1))  # checkpoint i is network i; the walk goes backwards
    ctx = AnalysisContext(nets[-1], task, cfg, model_entry.name, steps[0], dev, None, seed,
                          model_at=nets.__getitem__, steps=tuple(sorted(steps)))
    t0, c0 = time.perf_counter(), time.process_time()
    train = task.counterfactuals(variable, cfg.n_train, split="train", seed=seed)
    test = task.counterfactuals(variable, cfg.n_test, split="test", seed=seed)
    width = site_widths(nets[0])[kind]
    k = min(cfg.k or atlas_cfg.screen_k, width)
    first = make_alignment("oaf", width, k, seed).to(dev)  # stands in for the atlas's OAF
    walk(ctx, Cell(variable, role, kind, layer, k), train, test, steps, first, seed)
    rows.append(dict(stage="emergence", checkpoints=n, seconds=time.perf_counter() - t0,
                     cpu_s=time.process_time() - c0))

    df = pd.DataFrame(rows)
    df["ratio"] = (df["cpu_s"] / df["cpu_s"].iloc[0]).round(2)
    df[["seconds", "cpu_s"]] = df[["seconds", "cpu_s"]].round(1)
    df.insert(0, "cell", f"{variable} at {role} {kind}[{layer}], k={k}")
    df.insert(0, "threads", torch.get_num_threads())
    return df


def _last_held(task, roles, *pairs) -> str:
    """The last of `roles` that the base and source of some pair of every split hold (a
    task's later roles, as counting's last response, may lie past some sequences' ends)."""
    def held(role):
        return all(((task.roles(p.base_ids)[role] >= 0)
                    & (task.roles(p.source_ids)[role] >= 0)).any() for p in pairs)
    return next(r for r in reversed(roles) if held(r))
