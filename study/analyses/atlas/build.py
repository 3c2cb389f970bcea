"""The rows of table `atlas` (`study/analyses/atlas/analysis.py`): the screening pass at every
cell, the full search at each variable's best cells, both with their controls, and the null,
the controls' maximum over the grid (`with_null`)."""
from __future__ import annotations

import logging
import warnings
import numpy as np

from study.analyses.atlas.grid import cell, read, screen, take_pairs
from study.analyses.atlas.roles import roles_of
from study.analyses.common.stats import chance_iia, iia_scores

_log = logging.getLogger(__name__)
NEAR_BEST = 0.01  # the full search's k: the smallest whose training IIA is this near the best


def atlas_rows(ctx, saved: dict | None = None) -> list[dict]:
    """Every cell's rows, screened and (the best `top` per variable) fully searched, with the
    null and `credited` set (`with_null`). `saved`, if given, receives each full search's
    OAF at every k of its ladder, as das saves its own (`alignments.safetensors` keys
    `oaf/<variable>/<site>@pair/k=<k>`, the cell's role in the table's full row), so that a
    comparison can read each network at its own best cell."""
    from study.analyses.das.analysis import asked_variables
    from study.core.sites import default_sites

    cfg, model, task = ctx.config, ctx.model, ctx.task
    variables = asked_variables(cfg.variables, task)
    sites = default_sites(model, cfg.sites, cfg.layers, every_layer=True, setting="atlas")
    roles = roles_of(cfg.roles, task.roles(task.split("test").ids[:1]))
    untrained = _step0(ctx)
    seed = ctx.seed + cfg.seed
    run = dict(checkpoint=ctx.checkpoint, model=ctx.model_name, seed=ctx.seed)
    rows = []
    for v_i, variable in enumerate(variables):
        init = (seed * 1_000_003 + ctx.checkpoint) * 1009 + v_i
        cells = _screen_cells(model, untrained, task, variable, roles, sites, cfg, seed, init,
                              ctx.device)
        screened = []
        for kind, layer in sites:
            got = _screen_site(model, untrained, task, variable, cells[(kind, layer)], kind,
                               layer, cfg, init)
            screened += [{**run, **r} for r in got]
            _log.info(f"atlas: {variable} at {kind}[{layer}]: {len(got)} cells screened")
        rows += screened
        ranked = sorted((r for r in screened if not r["too_few"]),
                        key=lambda r: -np.nan_to_num(r["train_iia"], nan=-1.0))
        for rank, r in enumerate(ranked[:cfg.top]):
            train, test = cell_pairs(task, variable, cfg.n_train, cfg.n_test, seed, r["role"])
            row, tensors = _full(model, untrained, task, variable, train, test, r["role"],
                                 r["site"], r["layer"], cfg, init, ctx.checkpoint, ctx.device)
            rows.append({**run, **row})
            if saved is not None and rank == 0:  # the best cell's, one per variable and site
                saved.update(tensors)
    return with_null(rows)


def by_role(task) -> bool:
    """Whether the task's pair labels depend on where a pair is intervened, so that a cell's
    pairs are drawn at its role (`Task.pairs_by_role`; a task that does not say: no)."""
    return bool(getattr(task, "pairs_by_role", False))


def cell_pairs(task, variable, n_train, n_test, seed, role):
    """(train, test) pairs of a cell at `role`: drawn there where the task's labels depend on
    where a pair is intervened (`by_role`: counting, `Task.role_counterfactuals`), else the
    variable's pairs, which `cell` moves to the role (binding)."""
    draw = task.role_counterfactuals if by_role(task) else (
        lambda variable, n, role, split, seed: task.counterfactuals(variable, n, split=split,
                                                                    seed=seed))
    return tuple(draw(variable, n, role, split=split, seed=seed)
                 for n, split in ((n_train, "train"), (n_test, "test")))


def _screen_cells(model, untrained, task, variable, roles, sites, cfg, seed, init,
                  device) -> dict:
    """(kind, layer) -> {role: (data, shuffled, data0)} for every cell of the screening
    pass: the first `screen_pairs` training pairs and the test pairs, read once for every
    role where the pairs move to a role, once per role where they are drawn at it."""
    out: dict = {site: {} for site in sites}
    if not roles:
        return out
    aware = by_role(task)
    groups = ([(role, cell_pairs(task, variable, cfg.screen_pairs, cfg.n_test, seed, role))
               for role in roles] if aware else
              [(None, cell_pairs(task, variable, cfg.n_train, cfg.n_test, seed, roles[0]))])
    for at, (train, test) in groups:
        if not len(train) or not len(test):
            continue  # no pair holds the role
        few = take_pairs(train, np.arange(len(train)) < cfg.screen_pairs)
        reads = _reads(model, untrained, task, few, test, sites, cfg, device, at)
        for kind, layer in sites:
            with warnings.catch_warnings():  # a shuffled control's one-value warning
                warnings.simplefilter("ignore")
                for role in ([at] if aware else roles):
                    got = _cell(model, untrained, task, reads, role, kind, layer, cfg, init)
                    if got is not None:
                        out[(kind, layer)][role] = got
        del reads  # every position's vectors: only the cells' are kept
    return out


def _step0(ctx):
    """The run's untrained network, or None with a warning (the null then lacks it)."""
    from study.analyses.das.analysis import _step0 as das_step0
    net = das_step0(ctx)
    if net is None:
        warnings.warn("atlas: no step-0 network (ctx.model_at unset or no step-0 "
                      "checkpoint); the null is the shuffled control's alone")
    return net


def _reads(model, untrained, task, train, test, sites, cfg, device, at_role=None):
    """The pairs read once on the trained network and (judged by it) on the step-0 one
    (`at_role`: pairs drawn at that role, read at their own positions)."""
    mine = read(model, train, test, task, sites, device, cfg.eval_batch_size,
                at_role=at_role)
    zero = (None if untrained is None else
            read(untrained, train, test, task, sites, device, cfg.eval_batch_size, mine,
                 at_role=at_role))
    return mine, zero


def _cell(model, untrained, task, reads, role, kind, layer, cfg, seed):
    """One cell's data on the trained network, its shuffled control, and on the step-0
    network (None without one); None where no pair holds the role."""
    from study.analyses.das.controls import shuffled_sources, value_keys
    mine, zero = reads
    data = cell(model, mine, task, role, kind, layer, cfg.eval_batch_size)
    if data is None:
        return None
    kept = [take_pairs(p, (mine.roles[(split, "base")][role] >= 0)
                       & (mine.roles[(split, "source")][role] >= 0))
            for split, p in (("train", mine.train_pairs), ("test", mine.test_pairs))]
    shuffled = shuffled_sources(data, value_keys(kept[0]), value_keys(kept[1]), seed=seed,
                                pairs=tuple(kept), task=task)
    data0 = (None if zero is None else
             cell(untrained, zero, task, role, kind, layer, cfg.eval_batch_size))
    return data, shuffled, data0


def _scores(right, data, min_changed) -> dict:
    pt = data.test
    return iia_scores(right, pt.changed.cpu().numpy(), pt.tested.cpu().numpy(), min_changed)


def _screen_site(model, untrained, task, variable, cells, kind, layer, cfg,
                 seed) -> list[dict]:
    """The screening rows of every role's cell at one site (`cells`: role -> (data,
    shuffled, data0), `_screen_cells`): trained cells and shuffled controls in one loop, the
    step-0 cells in another."""
    names = list(cells)
    args = dict(k=cfg.screen_k, steps=cfg.screen_steps, batch_size=cfg.screen_batch,
                lr=cfg.screen_lr, seed=seed, pad_id=task.pad_id,
                eval_batch_size=cfg.eval_batch_size)
    both = screen(model, [cells[n][0] for n in names] + [cells[n][1] for n in names], **args)
    zero = ([None] * len(names) if untrained is None
            else screen(untrained, [cells[n][2] for n in names], **args))
    out = []
    for i, role in enumerate(names):
        data, shuffled, data0 = cells[role]
        main, shuf = both[i], both[len(names) + i]
        scores = _scores(main.right, data, cfg.min_changed)
        control = lambda s, d: (float("nan") if s is None  # noqa: E731
                                else _scores(s.right, d, cfg.min_changed)["iia"])
        k = min(cfg.screen_k, data.src_train.shape[1])
        out.append(dict(variable=variable, role=role, site=kind, layer=layer, stage="screen",
                        k=k, iia=scores["iia"], iia_lo=scores["iia_lo"],
                        iia_hi=scores["iia_hi"], train_iia=main.train_iia,
                        n_tested=scores["n_tested"], too_few=scores["too_few"],
                        shuffled_iia=control(shuf, shuffled), step0_iia=control(zero[i], data0),
                        chance=chance_iia(data.test.cf_labels.cpu().numpy(),
                                          data.test.tested.cpu().numpy())))
    return out


def _full(model, untrained, task, variable, train, test, role, kind, layer, cfg, seed,
          checkpoint, device) -> tuple[dict, dict]:
    """The das search (OAF over the k ladder) at one cell and both its controls over the
    same ladder: the row at the smallest k whose training IIA is within NEAR_BEST of the
    best, and the search's saved tensors (every k)."""
    from study.analyses.das.analysis import DasConfig
    from study.analyses.das.controls import control_ks
    from study.analyses.das.search import search
    from study.core.alignments import REFERENCE  # DAS's orthogonal alignment

    das = DasConfig(alignments=(REFERENCE,), k=cfg.k, steps=cfg.steps, lr=cfg.lr,
                    batch_size=cfg.batch_size, restarts=cfg.restarts, patience=100,
                    min_changed=cfg.min_changed, eval_batch_size=cfg.eval_batch_size,
                    n_train=cfg.n_train, n_test=cfg.n_test, save_pyvene=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reads = _reads(model, untrained, task, train, test, [(kind, layer)], cfg, device,
                       role if by_role(task) else None)
        data, shuffled, data0 = _cell(model, untrained, task, reads, role, kind, layer, cfg,
                                      seed)
    width = data.src_train.shape[1]
    ks = control_ks(das, width)
    found_rows, tensors = search(model, data, variable, -1, das, seed, checkpoint,
                                 alignments=(REFERENCE,))
    found = _by_k(found_rows)
    shuf = _by_k(search(model, shuffled, variable, -1, das, seed, checkpoint,
                        alignments=(REFERENCE,), ks=ks)[0])
    zero = ({} if data0 is None else
            _by_k(search(untrained, data0, variable, -1, das, seed, 0,
                         alignments=(REFERENCE,), ks=ks)[0]))
    train_iia = {k: r["train"]["iia"] for k, r in found.items()}
    scored = [v for v in train_iia.values() if not np.isnan(v)]
    k = (min(found) if not scored else
         min(k for k, v in train_iia.items() if not np.isnan(v) and v >= max(scored) - NEAR_BEST))
    t = found[k]["test"]
    control = lambda rows: (float("nan") if not rows  # noqa: E731
                            else rows.get(k, rows[max(rows)])["test"]["iia"])
    # a control's every k counts towards the null: the highest test IIA over its ladder
    best_of = lambda rows: max((r["test"]["iia"] for r in rows.values()  # noqa: E731
                                if not np.isnan(r["test"]["iia"])), default=float("nan"))
    return dict(variable=variable, role=role, site=kind, layer=layer, stage="full", k=k,
                iia=t["iia"], iia_lo=t["iia_lo"], iia_hi=t["iia_hi"],
                train_iia=found[k]["train"]["iia"], n_tested=t["n_tested"],
                too_few=t["too_few"], shuffled_iia=control(shuf), step0_iia=control(zero),
                chance=t["chance"], shuffled_max=best_of(shuf), step0_max=best_of(zero)), tensors


def _by_k(rows) -> dict:
    """Search rows -> {k: {split: row}}."""
    out: dict = {}
    for r in rows:
        out.setdefault(r["k"], {})[r["split"]] = r
    return out


def with_null(rows: list[dict]) -> list[dict]:
    """`rows` with each variable's null (the maximum over its whole grid, every role, layer
    and stage, of the shuffled and step-0 test IIA; a full search's control counts at every k
    of its ladder), where it came from, and `credited` (iia_lo above the null; never
    where no control ran)."""
    out = []
    for variable in dict.fromkeys(r["variable"] for r in rows):
        mine = [r for r in rows if r["variable"] == variable]
        null, where = float("nan"), ""
        for r in mine:
            for control, key in (("shuffled", "shuffled_max"), ("shuffled", "shuffled_iia"),
                                 ("step-0", "step0_max"), ("step-0", "step0_iia")):
                value = r.get(key, float("nan"))
                if not np.isnan(value) and (np.isnan(null) or value > null):
                    null = float(value)
                    where = f"{control} at {r['role']} {r['site']}[{r['layer']}] ({r['stage']})"
        for r in mine:
            r = {k: v for k, v in r.items() if k not in ("shuffled_max", "step0_max")}
            lo = r["iia_lo"]
            credited = bool(not r["too_few"] and not np.isnan(lo) and not np.isnan(null)
                            and lo > null)
            out.append({**r, "null": null, "null_from": where, "credited": credited})
    return out
