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
`projected` is the atlas as the analysis runs it: every variable's reads and screens, and
`atlas.top` full searches per variable at the measured full search's cost. With `measure=N`
only the first N asked variables are measured (`projected` scales the mean measured
variable to all of them). `seconds` is wall time, `cpu_s` the process's CPU time (every
thread's), the figure to read on a shared machine.
"""
from __future__ import annotations

import time

import torch

from study.run.build import frozen


class _Rows(list):
    """The stages' rows, each printed as it is measured (a long measurement stopped early
    still says what it measured)."""

    def append(self, row):
        print("bench atlas:", ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in row.items()), flush=True)
        super().append(row)


def bench_atlas(task, model_entry, model_config, cfg, measure: int | None = None,
                device: str = "cpu", seed: int = 0):
    """The stages' seconds as a DataFrame (one row per stage and site, then `total` rows)."""
    import pandas as pd

    from study.analyses.atlas.roles import roles_of
    from study.analyses.atlas.build import _full, cell_pairs, _screen_cells, _screen_site
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
    rows = _Rows()
    measured = variables[:measure] if measure else variables
    for v_i, variable in enumerate(measured):
        t0, c0 = time.perf_counter(), time.process_time()
        cells = _screen_cells(model, untrained, task, variable, roles, sites, cfg, seed, seed,
                              dev)
        rows.append(dict(variable=variable, stage="read", site="all", cells=len(roles) *
                         len(sites), seconds=time.perf_counter() - t0,
                         cpu_s=time.process_time() - c0))
        for kind, layer in sites:
            t0, c0 = time.perf_counter(), time.process_time()
            got = _screen_site(model, untrained, task, variable, cells[(kind, layer)], kind,
                               layer, cfg, seed)
            rows.append(dict(variable=variable, stage="screen", site=f"{kind}[{layer}]",
                             cells=len(got), seconds=time.perf_counter() - t0,
                             cpu_s=time.process_time() - c0))
        if v_i == 0:
            kind, layer = sites[0]
            t0, c0 = time.perf_counter(), time.process_time()
            train, test = cell_pairs(task, variable, cfg.n_train, cfg.n_test, seed, roles[-1])
            _full(model, untrained, task, variable, train, test, roles[-1], kind, layer, cfg,
                  seed, 0, dev)
            rows.append(dict(variable=variable, stage="full", site=f"{kind}[{layer}]",
                             cells=1, seconds=time.perf_counter() - t0,
                             cpu_s=time.process_time() - c0))
    df = pd.DataFrame(rows)
    if df["stage"].eq("full").sum() == 0:
        return df
    totals = []
    for col in ("seconds", "cpu_s"):
        per_variable = df[df["stage"] != "full"].groupby("variable")[col].sum().mean()
        full = float(df.loc[df["stage"] == "full", col].iloc[0])
        totals.append((float(df[col].sum()), len(variables) * (per_variable + cfg.top * full)))
    df = pd.concat([df, pd.DataFrame([
        dict(variable=f"{len(measured)} of {len(variables)} measured", stage="measured",
             site="", cells=len(df), seconds=totals[0][0], cpu_s=totals[1][0]),
        dict(variable=f"all {len(variables)}", stage="projected", site="",
             cells=len(variables) * len(roles) * len(sites), seconds=totals[0][1],
             cpu_s=totals[1][1])])], ignore_index=True)
    df[["seconds", "cpu_s"]] = df[["seconds", "cpu_s"]].round(1)
    df.insert(0, "threads", torch.get_num_threads())
    return df
