"""`python -m study bench atlas`: what the atlas of one network costs (`study/analyses/atlas/`),
stage by stage, and the whole atlas projected from them.

On an untrained network of the asked family and scale (the cost does not depend on the
weights; the step-0 control's network is another draw) and the asked `atlas.*` settings:
- `read`: each variable's pairs judged and read at every site, on both networks;
- `screen`: each site's screening pass, every role's cell and its shuffled control in one
  loop, the step-0 network's in another;
- `full`: one full search with both its controls (OAF over the k ladder) at one cell, the
  `:`-like last role at the first site, run whatever its screening score (an untrained
  network tests no pairs, so none would be chosen).
`projected_s` is the atlas as the analysis runs it: every variable's reads and screens, and
`atlas.top` full searches per variable at the measured full search's cost. With
`variables=` only some of the asked variables are measured (`projected_s` scales the mean
measured variable to all of them).
"""
from __future__ import annotations

import time

import torch

from study.run.build import frozen


def bench_atlas(task, model_entry, model_config, cfg, measure: int | None = None,
                device: str = "cpu", seed: int = 0):
    """The stages' seconds as a DataFrame (one row per stage and site, then `total` rows)."""
    import pandas as pd

    from study.analyses.atlas.analysis import roles_of
    from study.analyses.atlas.build import _full, _reads, _screen_site
    from study.analyses.atlas.grid import take_pairs
    from study.analyses.das.analysis import asked_variables
    from study.core.sites import default_sites
    from study.models.base import build_model
    from study.train.runtime import resolve_device

    dev = resolve_device(device)
    nets = []
    for s in (seed, seed + 1):
        torch.manual_seed(s)
        nets.append(frozen(build_model(model_entry, model_config, len(task.vocab),
                                       task.seq_len), dev))
    model, untrained = nets
    variables = asked_variables(cfg.variables, task)
    sites = default_sites(model, cfg.sites, cfg.layers, every_layer=True, setting="atlas")
    roles = roles_of(cfg.roles, task.roles(task.split("test").ids[:1]))
    rows = []
    measured = variables[:measure] if measure else variables
    for v_i, variable in enumerate(measured):
        t0 = time.perf_counter()
        train = task.counterfactuals(variable, cfg.n_train, split="train", seed=seed)
        test = task.counterfactuals(variable, cfg.n_test, split="test", seed=seed)
        few = take_pairs(train, [i < cfg.screen_pairs for i in range(len(train))])
        reads = _reads(model, untrained, task, few, test, sites, cfg, dev)
        rows.append(dict(variable=variable, stage="read", site="all", cells=len(roles) *
                         len(sites), seconds=time.perf_counter() - t0))
        for kind, layer in sites:
            t0 = time.perf_counter()
            got = _screen_site(model, untrained, task, variable, reads, roles, kind, layer,
                               cfg, seed)
            rows.append(dict(variable=variable, stage="screen", site=f"{kind}[{layer}]",
                             cells=len(got), seconds=time.perf_counter() - t0))
        if v_i == 0:
            kind, layer = sites[0]
            t0 = time.perf_counter()
            _full(model, untrained, task, variable, train, test, roles[-1], kind, layer, cfg,
                  seed, 0, dev)
            rows.append(dict(variable=variable, stage="full", site=f"{kind}[{layer}]",
                             cells=1, seconds=time.perf_counter() - t0))
    df = pd.DataFrame(rows)
    per_variable = df[df["stage"] != "full"].groupby("variable")["seconds"].sum().mean()
    full = float(df.loc[df["stage"] == "full", "seconds"].iloc[0])
    projected = len(variables) * (per_variable + cfg.top * full)
    df = pd.concat([df, pd.DataFrame([
        dict(variable=f"{len(measured)} of {len(variables)} measured", stage="measured_s",
             site="", cells=len(df), seconds=float(df["seconds"].sum())),
        dict(variable=f"all {len(variables)}", stage="projected_s", site="",
             cells=len(variables) * len(roles) * len(sites), seconds=projected)])],
        ignore_index=True)
    df["seconds"] = df["seconds"].round(1)
    df.insert(0, "threads", torch.get_num_threads())
    return df
