"""Analysis `das` (the registered analysis, its settings and its run): Distributed Alignment Search for the task's causal variables, with an
orthogonal (OAF) and two linear (LAF) alignments and a random-subspace control, k swept, and
two controls of every trained alignment: the same search with the variable's values shuffled
across pairs (the main one), and on the untrained network (step 0).

For each causal variable of the task (`task.causal_variables`; a joint variable such as
counting's `up_down:full`, several variables interchanged at once, when named in
`das.variables`), train pairs come from the `train` split and test pairs from `test`
(`task.counterfactuals(variable, n, split, seed)`).
At each chosen site the model stays frozen; the alignment maps the (standardised) site
vector, the first k dims come from the source and the rest from the base, and it is mapped
back (`study/analyses/das/alignment.py`). OAF and the LAFs are trained
(`study/analyses/das/search.py`); the random control is a fixed random rotation, never
trained.

Alignments (`das.alignments`; table column `alignment`):
- `oaf`: orthogonal, pyvene's rotated-space intervention [paper];
- `laf`: linear, of form `das.laf_form`: `rotated` (default) [ours], A = R (M M^T + 0.1 I)
  diag(s) with R orthogonal, which contains every OAF, started at a random rotation with
  W = I; `sd`, the authors' form alone. Searched like OAF (the search's lr and its cosine
  decay, restarts, each k from the previous k's fit of the same kind);
- `laf_sd`: the authors' LAF trained as they train it [paper code: grantsrb/mas,
  `SymmetricDefiniteMatrix`, `configs/linear_das.yaml`]: A = (M M^T + 0.1 I) diag(s) plus a
  bias, their initialisation (M ~ N(0, 1/d), sign parameters ~ N(0, 0.01^2), bias 0),
  Adam at their constant lr 1e-3 (`laf_sd_lr`, fixed), every k from a fresh draw (no warm
  start); the rest of the budget (steps, batch, restarts, stopping) is the search's;
- `random`: the untrained random rotation.
No alignment starts from another's fit [ours]: OAF and the LAFs are compared, not nested (a
LAF started at the OAF's solution is at least as good by construction).

Sites (defaults [paper, Grant et al. 2025], override with das.sites / das.layers / das.positions):
- recurrent models: the state after the pair's token (`state`, layer 0, position -1:
  base_pos in the base, source_pos in the source);
- transformers: the residual stream between layers, `resid[n_layers // 2]` (between the two
  layers of a 2-layer model), at the pair's positions; aligned pairs (base_pos = -1) use the
  answer position (the last scored position) in both. An explicit position p >= 0 means
  position p in base and source and applies to aligned pairs only.

Table `das`: checkpoint, variable, site, layer, position, alignment, k, split, then
- iia: share of the split's *tested* pairs whose every scored output is the counterfactual
  one. A pair is tested when the analysed network, run on the base without intervention,
  outputs the base label at every scored position and not the counterfactual label
  (`study.analyses.common.interchange.judged`) [ours: a pair whose base output is already
  the counterfactual one, or is wrong, rewards an intervention that does nothing or says
  nothing; counting's phase can be read from the response tokens the base is fed]; with
  `das.tested=base_and_source` also only where its output on the source is the source's
  own label (`Pairs.source_labels`) [ours];
- iia_lo, iia_hi: 95 % Wilson score interval of iia over the tested pairs;
- iia_all: the share over all pairs (Grant et al. 2025's IIA);
- n_pairs, n_changed, n_tested: pairs of the split, the causal model's changed ones
  (`Pairs.changed`: the counterfactual output differs from the base's), and the tested ones
  (a subset of the changed);
- too_few: fewer than `min_changed` tested *test* pairs; iia, iia_lo, iia_hi are NaN then
  (both splits' rows), the variable is not scored;
- iia_restart_sd: standard deviation over restarts of the split's iia (NaN: one restart).
alignment oaf | laf | laf_sd | random; split train | test; position -1 = the pair's
positions; iia NaN also where every restart of a LAF had cond(A) above `max_cond` (inverse
not trusted).

The controls [ours] (`study/analyses/das/controls.py`), for every trained alignment, with the
same sites, pairs, budget, restarts and seeds as the search, climbing the same k ladder with
the same warm starts (up to `das.control_k`: by default the whole ladder), every k reported.
Both are scored on the analysed network's tested pairs.
- Table `das_shuffled`: the search on the analysed network with each pair's source vector
  taken from another pair whose source gives the variable another value (bases, labels and
  tested pairs kept; pairs matched by their `value` stratum, the value the source gives the
  variable, which every task's pairs carry). A perfect alignment of the variable then writes the wrong value:
  its expected IIA is near 0 where the output depends on the value. What the search reaches
  here it reaches without the variable. Rows carry the analysed checkpoint.
- Table `das_control`: the search on the run's step-0 (untrained) checkpoint; its rows carry
  checkpoint 0. The untrained network gets few bases right, so its own tested pairs would
  leave nothing to score: the control asks whether a search makes the untrained network
  give the counterfactual answers the trained one was tested on. The network comes from
  `ctx.model_at(0)` (the application loads checkpoints; analyses may not); without it
  (`model_at` None, or no step-0 checkpoint) the table is empty and a warning says why.
- Table `das_transfer`: where the task names control pairs for a variable
  (`Task.control_pairs`: binding's renamed letters, `renamed:query`, `renamed:referent`),
  each of its trained alignments (and the random rotation), at every k, scored without
  training on those test pairs; `pairs` names them, `iia` is the share of tested pairs
  giving the control's counterfactual label (binding: the letter's identity moved) and
  `base_kept` the share keeping the base's answer (its role moved, or nothing).
- Table `das_strata` (`study/analyses/das/strata.py`): every alignment of the three
  searches (`search` trained | shuffled | step0) scored on the test pairs, its IIA over
  tested pairs per value of each stratum the task names (`Task.iia_strata`; binding:
  `source_depth`), NaN (too_few) under `min_changed` tested pairs.
Each is a separate table so that the `das` table of every analysed checkpoint stays one
checkpoint's. With `controls=false` all three are skipped.
Every row carries `chance`, the chance level of its pair set on the split
(`study.analyses.common.stats.chance_iia`: the share right if each tested pair got another
tested pair's counterfactual answer at random).
Learned alignments go to `alignments.safetensors` under `<alignment>/<variable>/<site>/k=<k>`
(the matrix: R for OAF/random, A for a LAF; suffix keys /mu /sigma /k and, for a LAF, /core
/signs /bias, and /rotation for a LAF of form `rotated`);
`study.analyses.das.alignment.load_alignment(path, key)` rebuilds one. The file holds the
latest analysed checkpoint (metadata "checkpoint"); an earlier checkpoint's file is kept as
`alignments-<step>.safetensors`. The controls' alignments are not saved. With `save_pyvene`
(default) each variable's trained alignments (OAF, LAF, LAF sd) at their chosen k (the
smallest within 0.01 of the best test IIA) are also written in pyvene's own format under
`pyvene/` (`study/analyses/das/export.py`; latest analysed checkpoint only).

Training and scoring run through `pyvene.IntervenableModel`s over the network's sites, with
the pairs' source vectors read once (`study/analyses/das/search.py`). One loop trains every
alignment (`study/analyses/das/loop.py`), a batch of members at a time: the restarts of one
(alignment, k) (`runtime.batch_restarts`) and, on a GPU, the kinds of one k (`runtime.batch_kinds`) train
together, one forward over their stacked batches, each member's alignment on its own rows
(`study/analyses/das/stacked.py`); a single training is the batch of one.
"""
from __future__ import annotations

from dataclasses import dataclass

from study.models.sites import KINDS
from study.core.errors import UsageError
from study.core.registry import register
from study.core.settings import fixed, setting

import study.analyses.das.alignments as _alignments

ALIGNMENTS = _alignments.names()  # every registered kind (study/analyses/das/alignments/)
TRAINED = _alignments.trained()  # the searched arms; the control (`random`) is never trained
LAF_FORMS = ("sd", "rotated")  # `laf_form`; the classes are in alignment.py
CONTROL_K = ("all",)  # `control_k`, besides one k of the ladder
BATCH_KINDS = ("auto", "on", "off")  # `batch_kinds`
TESTED = ("base", "base_and_source")  # `tested`


@dataclass(frozen=True)
class DasConfig:
    variables: tuple[str, ...] = setting(
        ("all",), "all = every causal variable of the task; main = the task's headline "
        "variables (counting: up_down:count; binding: root_value; assign_add: x, y); or "
        "names; a joint variable (counting: up_down:full, up_up:full, the algorithm's whole "
        "state) only by name")
    sites: tuple[str, ...] = setting((), "() = state (recurrent) or resid (transformers)")
    layers: tuple[int, ...] = setting((), "() = 0 for state, n_layers // 2 for resid")
    positions: tuple[int, ...] = setting(
        (-1,),
        "-1 = the pair's positions (answer position if aligned)")
    alignments: tuple[str, ...] = setting(
        ALIGNMENTS, "; ".join(f"{k.name}: {k.help}" for k in _alignments.kinds().values()))
    k: tuple[int, ...] = setting(
        (1, 2, 4, 16, 32), "subspace sizes swept: dims taken from the source [paper]")
    n_train: int = setting(10_000, "counterfactual pairs the alignment is trained on [paper]")
    n_test: int = setting(1_000, "pairs IIA is tested on [paper]")
    batch_size: int = setting(128, "pairs per alignment update [paper]")
    lr: float = setting(1e-3, "[paper] Adam")
    steps: int = setting(
        20_000, "alignment updates [paper code: grantsrb/mas configs, num_training_steps]")
    stop_iia: float = setting(0.995, "[paper code: upper_acc_thresh] early stop on training IIA")
    patience: int = setting(
        0,
        "[ours] stop after this many updates without a training-IIA gain; 0 = off")
    lr_floor: float = setting(
        0.05, "[ours] the lr decays on a cosine to lr * lr_floor over `steps`; 1 = constant")
    restarts: int = setting(
        3, "[ours] trainings per (alignment, k); the best by training-split IIA is kept")
    batch_restarts: bool = setting(
        True, "[ours] train an (alignment, k)'s restarts together, one network forward per "
        "step for all (the result of training them one after another, to float tolerance); "
        "false = one after another", runtime=True)
    batch_kinds: str = setting(
        "auto", "[ours] train the alignment kinds of one k together (OAF, the LAFs: each "
        "starts from its own draw or its own fit at the smaller k), one network forward per "
        "step for all (the result of training them one after another, to float tolerance); "
        "auto = on a GPU, where the small networks' steps are bound by kernel launches, not "
        "on a CPU, where stacking them is slower; on | off", runtime=True)
    warm_start: bool = setting(
        True, "[ours] the first restart at k starts from the kept alignment of the previous k")
    tested: str = setting(
        "base", "[ours] the pairs that test an intervention: base = those whose base the "
        "network answers (the base label at every scored position, not the counterfactual "
        "one); base_and_source = of those, the ones whose source it answers too (its own "
        "label; pairs that carry none are refused)")
    min_changed: int = setting(
        100, "[ours] fewer tested test pairs (the network's base output is the base label, "
        "not the counterfactual one) than this: the variable is reported too_few")
    controls: bool = setting(
        True, "[ours] also run each trained alignment's controls: the same search with the "
        "variable's values shuffled across pairs (das_shuffled) and on the step-0 (untrained) "
        "network (das_control)")
    control_k: str = setting(
        "all", "[ours] the k the controls reach: all (the whole ladder das.k) or one k of "
        "das.k (the ladder up to it); they climb it as the search does, each k warm-started "
        "from the one before, with the search's restarts and seeds, every k reported")
    standardize: bool = setting(
        True, "[ours] standardise the site (per-dimension mean and sd of the training pairs) "
        "before the alignment; the authors' code leaves it off [paper code: grantsrb/mas, "
        "zscore_alignment: False], as the paper preset does")
    laf_form: str = setting(
        "rotated", "the form of `laf`: rotated [ours]: R (M M^T + 0.1 I) diag(s) with R "
        "orthogonal, which contains every OAF (sd reaches orthogonal projections only onto "
        "standardised axes), started at a random rotation (W = I); sd: the authors' A = "
        "(M M^T + 0.1 I) diag(s) [paper code: grantsrb/mas SymmetricDefiniteMatrix], searched "
        "like OAF")
    laf_sd_lr: float = fixed(
        1e-3, "[paper code: grantsrb/mas configs/linear_das.yaml, lr; constant Adam] the "
        "learning rate of `laf_sd`, the authors' LAF trained as they train it")
    max_cond: float = setting(1e5, "[ours] LAF with cond(A) above this is refused (IIA NaN)")
    eval_batch_size: int = setting(
        1000, "pairs per forward pass when scoring IIA and reading the sites (das)",
        runtime=True)
    save_pyvene: bool = setting(
        True, "[ours] also save each variable's OAF and LAF at its chosen k with pyvene's "
        "IntervenableModel.save, under pyvene/")
    seed: int = setting(0, "added to the run's seed: pairs and alignment initialisation")

    def __post_init__(self):
        def bad(key, value, allowed):
            raise UsageError(f"das.{key}={value}: {allowed}")

        for s in self.sites:
            if s not in KINDS:
                bad("sites", ",".join(self.sites), f"choose from {', '.join(KINDS)}")
        for a in self.alignments:
            if a not in ALIGNMENTS:
                bad("alignments", ",".join(self.alignments), f"choose from {', '.join(ALIGNMENTS)}")
        if not self.alignments:
            bad("alignments", "", "give at least one of " + ", ".join(ALIGNMENTS))
        if self.tested not in TESTED:
            bad("tested", self.tested, f"choose from {', '.join(TESTED)}")
        if self.batch_kinds not in BATCH_KINDS:
            bad("batch_kinds", self.batch_kinds, f"choose from {', '.join(BATCH_KINDS)}")
        if self.laf_form not in LAF_FORMS:
            bad("laf_form", self.laf_form, f"choose from {', '.join(LAF_FORMS)}")
        if not self.k or min(self.k) < 1:
            bad("k", ",".join(map(str, self.k)), "give one or more integers >= 1")
        if any(layer < 0 for layer in self.layers):
            bad("layers", ",".join(map(str, self.layers)), "layers are >= 0")
        if not self.positions or min(self.positions) < -1:
            bad("positions", ",".join(map(str, self.positions)), "-1 (the pair's) or p >= 0")
        for key in ("n_train", "n_test", "batch_size"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")
        if self.eval_batch_size < 1:
            raise UsageError(f"runtime.eval_batch_size={self.eval_batch_size}: must be at least 1")
        if self.steps < 0:
            bad("steps", self.steps, "must be >= 0")
        if not self.lr > 0:
            bad("lr", self.lr, "must be positive")
        if self.control_k not in CONTROL_K and not (
                self.control_k.isdigit() and int(self.control_k) in self.k):
            bad("control_k", self.control_k,
                f"all, or one k of das.k ({','.join(map(str, self.k))})")
        for key in ("restarts",):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be at least 1")
        if self.min_changed < 1:
            bad("min_changed", self.min_changed, "must be at least 1")
        if not 0 < self.lr_floor <= 1:
            bad("lr_floor", self.lr_floor, "must be in (0, 1]")
        if self.patience < 0:
            bad("patience", self.patience, "must be 0 (off) or positive")
        if not 0 < self.stop_iia <= 1:
            bad("stop_iia", self.stop_iia, "must be in (0, 1]")
        if not self.max_cond > 1:
            bad("max_cond", self.max_cond, "must be greater than 1")


GROUPS = ("all", "main")  # names in `das.variables` that stand for several variables


def das_variables(task) -> tuple[str, ...]:
    """What `das.variables` may name: the task's causal variables, then its joint ones
    (several variables interchanged at once, e.g. counting's `up_down:full`)."""
    return (*task.causal_variables, *task.joint_variables)


def asked_variables(asked: tuple[str, ...], task) -> tuple[str, ...]:
    """`das.variables` with `all` (every causal variable; also the meaning of an empty
    setting) and `main` (`task.main_variables`) expanded, in order, without repeats, each
    name checked against the task's (`task` an instance or its class)."""
    from study.analyses.common.context import chosen
    out: list[str] = []
    for name in asked or ("all",):
        group = {"all": task.causal_variables,
                 "main": task.main_variables or task.causal_variables}.get(name, (name,))
        out += [v for v in group if v not in out]
    return chosen("das.variables", tuple(out), (*das_variables(task), *GROUPS),
                  f"a causal variable of {task.name}")


def check(cfg: DasConfig, task_cls, model_entry, model_config) -> None:
    """Before training: the asked variables are the task's, the asked sites and layers the
    model's (the same rules `default_sites` applies to the built network), and no k is
    larger than a site's width (such a k would be skipped at every site, leaving no
    alignment where the ladder promised one)."""
    from study.analyses.common.context import check_sites
    from study.models.sites import declared_kinds
    asked_variables(cfg.variables, task_cls)
    check_sites("das.sites", cfg.sites, model_entry)
    kinds = cfg.sites or (("state",) if "state" in declared_kinds(model_entry.capabilities) else ("resid",))
    n_layers = getattr(model_config, "n_layers", None)
    for kind in kinds:
        if kind == "state" and cfg.layers and set(cfg.layers) != {0}:
            raise UsageError(f"das.layers={','.join(map(str, cfg.layers))}: state sites have "
                             f"one layer, 0 (the position is the time step)")
        count = None if n_layers is None else n_layers + 1 if kind == "resid" else n_layers
        if kind != "state" and count is not None and cfg.layers and max(cfg.layers) >= count:
            raise UsageError(f"das.layers: {kind}[{max(cfg.layers)}] does not exist; model "
                             f"{model_entry.name} has {count} {kind} sites (0..{count - 1})")
        width = _site_width(kind, model_config)
        if width is not None and max(cfg.k) > width:
            raise UsageError(f"das.k={','.join(map(str, cfg.k))}: k={max(cfg.k)} is larger than "
                             f"the {kind} site of model {model_entry.name}, which has {width} "
                             f"dims; give k of at most {width}")


def _site_width(kind: str, model_config) -> int | None:
    """The width of one unit of a site kind, from the model's config (`SiteKind.width`:
    state = d_state, head = n_heads * d_head, the other kinds d_model); None where the
    config does not say (a family with other field names: the search then skips a k above
    the width with a warning)."""
    if kind == "state":
        return getattr(model_config, "d_state", None)
    if kind == "head":
        n, d = getattr(model_config, "n_heads", None), getattr(model_config, "d_head", None)
        return None if n is None or d is None else n * d
    return getattr(model_config, "d_model", None)


@register("analysis", "das", config=DasConfig, check=check, presets={
    # Grant et al.'s regime [paper code: grantsrb/mas, configs/orthogonal_das.yaml and
    # linear_das.yaml]: the site unstandardised (zscore_alignment: False); their LAF
    # (SymmetricDefiniteMatrix with a bias) and their OAF (RotationMatrix) side by side, each
    # trained their way: Adam at a constant lr, every k from a fresh draw (no warm start);
    # our `laf` left out. Their budget is the defaults: lr 1e-3, 20,000 steps, batch 128,
    # 10,000 training and 1,000 test pairs, no patience; [ours] 3 restarts per (alignment,
    # k), the best by training IIA. `das.scale=paper` takes this regime at any scale
    "paper": {"standardize": False, "alignments": ("oaf", "laf_sd", "random"),
              "lr_floor": 1.0, "warm_start": False},
    # [ours] minutes per variable on a CPU: fewer, larger Adam steps than the paper's
    # (restarts x (OAF, LAF) on the trained network, and each one's two controls over the
    # same ladder); 1000 test pairs, so that ctx_distr:count (~12 % of its pairs change the
    # output) keeps ~120 changed ones, above min_changed where the network tests most of
    # them. k climbs in small steps (each k starts from the one before): on the counting GRU
    # the ladder 1, 2, 4, 16 leaves OAF at k = 16 ~0.01-0.02 below the ladder 1, 2, 4, 8, 12,
    # 16, which 3x the steps at k = 16 do not make up. The authors' LAF (laf_sd) is left to
    # das.alignments: trained their way (lr 1e-3, constant) it needs their 20,000 steps, not
    # 500. The task's headline variables only (`main`), one restart and the ladder 1, 2, 4, 8,
    # 16: about 4 minutes per network on a 2-core CPU (the counting GRU) with the controls at
    # the largest k only; climbing the whole ladder, each control costs about
    # what the trained alignments' search costs (not re-timed); `das.variables=all
    # das.restarts=2` for the rest
    "small": {"variables": ("main",), "n_train": 2000, "n_test": 1000, "steps": 500,
              "lr": 5e-3, "batch_size": 64, "patience": 100, "k": (1, 2, 4, 8, 16),
              "restarts": 1, "alignments": ("oaf", "laf", "random")},
    "smoke": {"n_train": 64, "n_test": 32, "steps": 5, "batch_size": 32, "k": (2,),
              "eval_batch_size": 64, "restarts": 2, "min_changed": 2,
              "alignments": ("oaf", "laf", "random")},
})
def run(ctx):
    """Distributed Alignment Search (OAF, LAFs, random control) for the task's variables, and
    each trained alignment's controls: shuffled values (`das_shuffled`) and the step-0
    network (`das_control`), over the ladder up to `das.control_k`, and the task's control
    pairs (`das_transfer`)."""
    import warnings

    import pandas as pd

    from study.analyses.common.identify import ConfoundShares
    from study.analyses.das.alignment import save_alignments
    from study.analyses.das.controls import (control_ks, shuffled_sources, transfer_rows,
                                             value_keys)
    from study.analyses.das.search import COLUMNS, search, site_data
    from study.analyses.das.snapshot import Snapshots
    from study.analyses.das.strata import stratum_rows, task_strata
    from study.core.tables import DAS_STRATA, DAS_TRANSFER
    from study.models.sites import default_sites

    cfg, model, task = ctx.config, ctx.model, ctx.task
    variables = asked_variables(cfg.variables, task)
    sites = default_sites(model, cfg.sites, cfg.layers, every_layer=False, setting="das")
    seed = ctx.seed + cfg.seed
    # each training's snapshots, so that an interrupted analysis continues (`partial/`)
    snaps = Snapshots.under(ctx.out_dir, cfg).within(checkpoint=ctx.checkpoint)
    untrained = _step0(ctx) if cfg.controls else None
    trained = tuple(a for a in cfg.alignments if a in TRAINED) if cfg.controls else ()
    n_controls = 1 + (untrained is not None)
    per_site = (len(cfg.k) * len(cfg.alignments)
                + n_controls * len(control_ks(cfg)) * len(trained))
    rows, shuffled, control, transfer, saved, kept = [], [], [], [], {}, {}
    shares = ConfoundShares()  # each pair set's confound shares, once for every site
    by_stratum = []  # das_strata: every search's test IIA per value of the task's strata
    fitted = lambda kept: {(a, k): inst for (a, _, _, k), inst in kept.items()}  # noqa: E731
    from study.core.progress import tqdm  # a bar on a terminal, a log line every 30 s
    bar = tqdm(total=len(variables) * len(sites) * len(cfg.positions) * per_site,
               desc="das", unit="alignment", disable=None)
    for v_i, variable in enumerate(variables):
        train_pairs = task.counterfactuals(variable, cfg.n_train, split="train", seed=seed)
        test_pairs = task.counterfactuals(variable, cfg.n_test, split="test", seed=seed)
        strata = task_strata(task, test_pairs)
        keys = (value_keys(train_pairs), value_keys(test_pairs)) if trained else None
        checks = ([task.counterfactuals(kind, cfg.n_test, split="test", seed=seed)
                   for kind in task.control_pairs.get(variable, ())] if trained else [])
        for kind, layer in sites:
            for position in cfg.positions:
                try:
                    data = site_data(model, train_pairs, test_pairs, kind, layer, position,
                                     ctx.device, cfg.eval_batch_size, outputs=task,
                                     source=cfg.tested == "base_and_source", shares=shares)
                except ValueError as e:  # e.g. an explicit position for explicit pairs
                    raise UsageError(f"das at {kind}[{layer}] for {variable}: {e}") from None
                # [ours] alignment initialisations differ between checkpoints (the pairs do
                # not), so subspaces compared across checkpoints do not agree by construction
                init = (seed * 1_000_003 + ctx.checkpoint) * 1009 + v_i
                here = {}
                r, s = search(model, data, variable, position, cfg, init,
                              ctx.checkpoint, progress=bar, kept=here,
                              snapshots=snaps.within(search="trained"))
                rows += r
                saved.update(s)
                by_stratum += stratum_rows(model, data, fitted(here), strata, variable,
                                           position, cfg, ctx.checkpoint, "trained")
                if cfg.save_pyvene:
                    kept.update(here)
                if not trained:
                    continue
                # the controls: the search itself, its ladder, warm starts, restarts and
                # seeds; their alignments are not saved (nothing reads them)
                ks = control_ks(cfg, data.src_train.shape[1])
                mixed, got = shuffled_sources(data, *keys, seed=init,
                                              pairs=(train_pairs, test_pairs), task=task), {}
                r, _ = search(model, mixed, variable, position, cfg, init, ctx.checkpoint,
                              progress=bar, alignments=trained, ks=ks, kept=got,
                              snapshots=snaps.within(search="shuffled control"))
                shuffled += r
                by_stratum += stratum_rows(model, mixed, fitted(got), strata, variable,
                                           position, cfg, ctx.checkpoint, "shuffled")
                if untrained is not None:
                    data0 = site_data(untrained, train_pairs, test_pairs, kind, layer, position,
                                      ctx.device, cfg.eval_batch_size, outputs=task,
                                      judge=model, source=cfg.tested == "base_and_source",
                                      shares=shares)
                    got = {}
                    r, _ = search(untrained, data0, variable, position, cfg, init, 0,
                                  progress=bar, alignments=trained, ks=ks, kept=got,
                                  snapshots=snaps.within(search="step-0 control"))
                    control += r
                    by_stratum += stratum_rows(untrained, data0, fitted(got), strata,
                                               variable, position, cfg, 0, "step0")
                fits = fitted(here)
                for pairs in checks:
                    transfer += transfer_rows(model, pairs, fits, kind, layer, position,
                                              ctx.device, cfg, task, ctx.checkpoint, variable,
                                              shares)
    bar.close()
    save_alignments(saved, ctx.out_dir, ctx.checkpoint)
    if cfg.save_pyvene:
        from study.analyses.das.export import export
        export(model, rows, kept, ctx.out_dir, ctx.checkpoint)
    if cfg.controls and untrained is None:
        warnings.warn("das: no step-0 network (ctx.model_at unset or no step-0 checkpoint); "
                      "das_control is empty and the report's verdict has no step-0 control")
    return {"das": pd.DataFrame(rows, columns=COLUMNS),
            "das_shuffled": pd.DataFrame(shuffled, columns=COLUMNS),
            "das_control": pd.DataFrame(control, columns=COLUMNS),
            "das_transfer": pd.DataFrame(transfer, columns=list(DAS_TRANSFER.columns)),
            DAS_STRATA.name: DAS_STRATA.frame(by_stratum)}


def _step0(ctx):
    """The run's untrained network (step 0) from `ctx.model_at`, or None where unavailable."""
    if ctx.model_at is None:
        return None
    try:
        return ctx.model_at(0)
    except (FileNotFoundError, LookupError, ValueError) as e:
        import warnings
        warnings.warn(f"das: no step-0 checkpoint ({e}); no trained control")
        return None
