"""The das analysis's IIA split by pair strata (table `das_strata`): each fitted alignment of a
search scored once more on the test pairs, and its IIA over tested pairs reported per value
of each stratum the task names (`Task.iia_strata`; binding: `source_depth`, the hops of the
source's own chain), so that a variable found on shallow sources and missed on deep ones
(or the reverse) shows [ours; Wu et al. 2025 trace binding hop by hop].
"""
from __future__ import annotations

import numpy as np

from study.analyses.common.stats import iia_scores

SEARCHES = ("trained", "shuffled", "step0")  # the `search` column: das, das_shuffled, das_control


def task_strata(task, pairs) -> dict[str, np.ndarray]:
    """The strata of `pairs` (the test pairs) that the task splits IIA by: name -> (n,)."""
    names = getattr(task, "iia_strata", ())
    return {s: np.asarray(pairs.strata[s]) for s in names if s in pairs.strata}


def stratum_rows(model, data, fits: dict, strata: dict, variable: str, position: int, cfg,
                 checkpoint: int, search: str) -> list[dict]:
    """Rows of `das_strata` for the alignments `fits` ((alignment, k) -> the fitted instance)
    of one search at one site (`data`, a `search.SiteData`, whose tested pairs are the
    search's), `strata` name -> (n_test,) values of the test pairs. A value with fewer than
    `cfg.min_changed` tested pairs gets NaN (too_few), as the das table's variables do."""
    from study.analyses.das.search import pair_right

    if not strata:
        return []
    changed = data.test.changed.cpu().numpy()
    tested = data.test.tested.cpu().numpy()
    rows = []
    for (name, k), inst in sorted(fits.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        right = pair_right(model, data, inst, "test", cfg.eval_batch_size).cpu().numpy()
        for stratum, values in strata.items():
            for value in np.unique(values):
                on = values == value
                s = iia_scores(right[on], changed[on], tested[on], cfg.min_changed)
                rows.append(dict(checkpoint=checkpoint, variable=variable, site=data.kind,
                                 layer=data.layer, position=position, alignment=name, k=k,
                                 split="test", search=search, stratum=stratum,
                                 value=int(value), iia=s["iia"], iia_lo=s["iia_lo"],
                                 iia_hi=s["iia_hi"], n_pairs=s["n_pairs"],
                                 n_changed=s["n_changed"], n_tested=s["n_tested"],
                                 too_few=s["too_few"]))
    return rows
