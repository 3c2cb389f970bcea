"""The controls of a DAS search [ours]: where they run (`control_ks`), the shuffled-variable
control's pairs (`shuffled_sources`), and the trained alignments scored on a task's control
pairs (`transfer_rows`).

Shuffled-variable control (table `das_shuffled`): the search of every trained alignment on the
*trained* network, with the same bases, counterfactual labels, tested pairs, k and budget, but
each pair's cached source vector taken from another pair whose source gives the variable a
*different value*. The labels still say what the pair's own source value would make the base
output, so the variable's values no longer reach the labels: a perfect alignment of the true
variable writes the other pair's value and gives that value's output, which differs from the
label wherever the output depends on the value (counting: a different count ends the response
elsewhere), so its expected IIA is near 0 (the planted tests: 1.00 on the true pairs, 0.00
shuffled; a perfect code of binding's query letter, 0.00). A search that still scores high
has fitted the labels through something other than the variable — the bar an alignment of
the real variable must clear. Pairs are matched by the task's `value` stratum, which every
task's pairs carry (`study.tasks.base`): the value the variable takes in the source (binding's
`query`: the source's letter, not the answer it leads to; matched by the answer, a pair could
take the source of a pair with the same letter, and a perfect letter code would score that
share by construction). The reassignment is a seeded permutation of the pairs (every source
vector used once, the sources' distribution unchanged) as far as the values' counts allow; a
pair left without a partner (one value holds more than half the pairs: counting's phase)
draws a source of another value at random, and with one value only a pair keeps its own,
with a warning. Where the task's causal model says what a base outputs with the variable set
to a given value (`Task.value_labels`), the pairs on which the partner's value gives the
label anyway (binding: another letter bound to the same digit) are not scored: there no
intervention can tell the two values apart, and a perfect code would score them by chance.

Step-0 control (table `das_control`): the same search on the run's untrained network
(`study.analyses.das.analysis.run`).

Both controls run the search itself (`search.search`) over the k ladder up to `control_ks`:
from the smallest k, each k warm-started from the previous k's kept fit as the search is,
with the same restarts and the same seeds, and every k reported — so a control gets the
optimisation the search it judges got, at every k it is quoted at. `das.control_k=all`
(default) runs the whole ladder; one k runs the ladder up to it.

Transfer control (table `das_transfer`): where the task names control pairs for a variable
(`Task.control_pairs`; binding's renamed letters, `study/tasks/binding/renamed.py`), each of
the variable's trained alignments, at every k, is scored without training on those test
pairs: `iia` the share of tested pairs whose output is the control's counterfactual label,
`base_kept` the share whose output stayed the base's.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import torch


def control_ks(cfg, width: int | None = None) -> tuple[int, ...]:
    """The k the controls run at, the ladder they climb: every k of `cfg.k` up to
    `cfg.control_k` (all: the largest) that a site of `width` dims holds (any without a
    width), the smallest one kept where none fits."""
    ks = sorted(cfg.k)
    top = ks[-1] if cfg.control_k == "all" else int(cfg.control_k)
    ladder = [k for k in ks if k <= top]
    fit = [k for k in ladder if width is None or k <= width]
    return tuple(fit or ladder[:1])


def value_keys(pairs) -> np.ndarray:
    """(n,) int: which value of the variable each pair's source carries, the pairs' `value`
    stratum (every task's pairs carry one)."""
    value = getattr(pairs, "strata", {}).get("value")
    if value is None:
        raise ValueError(f"pairs of kind {pairs.kind!r} carry no `value` stratum: the "
                         "shuffled-variable control needs the value each source gives the "
                         "variable (see study.tasks.base)")
    return np.asarray(value).astype(np.int64)


def shuffle_by_value(keys: np.ndarray, seed: int) -> np.ndarray:
    """Seeded source indices `perm` ((n,) int): pair i takes pair perm[i]'s source, with
    keys[perm[i]] != keys[i] wherever another value exists. A random permutation, then each
    pair that drew its own value swaps partners with a random pair for which the swap gives
    both another value; where no such swap is left (one value holds more than half the
    pairs), the pair draws a random source of another value instead, so that source is used
    twice. With one value only, every pair keeps a source of its own value."""
    keys = np.asarray(keys)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(keys))
    for i in np.flatnonzero(keys[perm] == keys):
        if keys[perm[i]] != keys[i]:
            continue  # fixed by an earlier swap
        swaps = np.flatnonzero((keys[perm] != keys[i]) & (keys != keys[perm[i]]))
        if len(swaps):
            j = swaps[rng.integers(len(swaps))]
            perm[i], perm[j] = perm[j], perm[i]
            continue
        other = np.flatnonzero(keys != keys[i])
        if len(other):
            perm[i] = other[rng.integers(len(other))]
    return perm


def shuffled_sources(data, train_keys: np.ndarray, test_keys: np.ndarray, seed: int,
                     pairs=None, task=None):
    """`data` (a `search.SiteData`) with each split's cached source vectors reassigned across
    its pairs by `shuffle_by_value` (bases, labels and the standardisation's activations
    kept). Tested pairs are kept, but where the task's causal model can say what each base
    outputs with the variable set to its new partner's value (`pairs` = the (train, test)
    `Pairs`, `task.value_labels`), a pair on which that output is still its label leaves the
    tested set: there the partner's value and its own give the same answer (binding: two
    letters bound to one digit), so the pair cannot tell them apart."""
    out = {}
    for i, (split, keys, s) in enumerate((("train", train_keys, seed),
                                          ("test", test_keys, seed + 1))):
        keys = np.asarray(keys)
        perm = shuffle_by_value(keys, s)
        same = int((keys[perm] == keys).sum())
        if same:
            warnings.warn(f"das: shuffled control: {same} of {len(keys)} {split} pairs found no "
                          f"pair of another value and keep their own source")
        src = getattr(data, f"src_{split}")
        out[f"src_{split}"] = src[torch.as_tensor(perm, device=src.device)]
        labels = None if pairs is None or task is None else task.value_labels(pairs[i],
                                                                              keys[perm])
        pt = getattr(data, split)
        if labels is not None:
            differs = torch.as_tensor((np.asarray(labels) != np.asarray(pairs[i].cf_labels))
                                      .any(1), device=pt.tested.device)
            out[split] = replace(pt, tests=pt.tested & differs)
    return replace(data, _iv={}, **out)


def transfer_rows(model, pairs, fits: dict, kind: str, layer: int, position: int, device,
                  cfg, outputs, checkpoint: int, variable: str, shares=None) -> list[dict]:
    """Rows of `das_transfer`: each fitted alignment `fits[(alignment, k)]` of `variable` at
    site (kind, layer, position) scored, untrained, on the control `pairs` (test split).
    `shares`: where the pairs' confound shares are kept (`ConfoundShares`); None: computed
    here."""
    from study.analyses.common.interchange import judged, pair_tensors
    from study.analyses.common.stats import chance_iia, iia_scores
    from study.analyses.common.identify import ConfoundShares
    from study.analyses.das.search import pairs_right
    from study.models.sites.capture import gather_site
    from study.models.sites.pyvene_bridge import site_intervenable

    bs = cfg.eval_batch_size
    pt = judged(model, pair_tensors(pairs, device, position, outputs), bs)
    src = gather_site(model, pt.source_ids, kind, layer, pt.source_pos, bs)
    changed, tested = pt.changed.cpu().numpy(), pt.tested.cpu().numpy()
    chance = chance_iia(pt.cf_labels.cpu().numpy(), tested)
    conf = (ConfoundShares() if shares is None else shares).of(outputs, pairs, pt)
    rows = []
    for (name, k), inst in sorted(fits.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        inst.eval()
        iv = site_intervenable(model, kind, layer, inst)
        with torch.no_grad():
            right = pairs_right(iv, pt, src, bs).cpu().numpy()
            kept = pairs_right(iv, replace(pt, cf_labels=pt.base_labels), src, bs).cpu().numpy()
        scores = iia_scores(right, changed, tested, cfg.min_changed)
        rows.append(dict(checkpoint=checkpoint, variable=variable, site=kind, layer=layer,
                         position=position, alignment=name, k=k, split="test", **scores,
                         iia_restart_sd=float("nan"), chance=chance,
                         confound_input=conf.input, confound_answer=conf.answer, pairs=pairs.kind,
                         base_kept=float(kept[tested].mean()) if tested.any() else float("nan")))
    return rows
