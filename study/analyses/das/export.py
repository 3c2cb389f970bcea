"""The trained alignments in pyvene's own format, and the choice of k they are saved at.

`alignments.safetensors` keeps every (alignment, variable, site, k) the search trained, as
tensors. Beside it, `pyvene/` holds, for each variable, site and trained alignment (OAF,
LAF, LAF sd), the alignment at its chosen k as a `pyvene.IntervenableModel` over our sites
written by pyvene's own `IntervenableModel.save`:

    analyses/das/pyvene/index.json                       what each directory holds
    analyses/das/pyvene/<alignment>/<variable>/<site>/   config.json + intkey_*.bin

(`:` in a variable's name is written `-` in the directory name.) A pyvene user loads one with
pyvene alone, given the network (`pyvene.IntervenableModel.load(directory,
study.models.sites.pyvene_bridge.register(net))`); the alignment classes are importable from
`study.analyses.das.alignment`, where pyvene's saved type names point. The step kind's model holds
one representation per time step (`site_intervenable`), so pyvene's format stores one copy of
the alignment per step; that is why only the chosen k is exported [ours].

Chosen k [ours]: the smallest k whose *training-split* IIA (tested pairs) is within
`TOLERANCE` of the best k of that alignment, variable and site — a larger subspace that adds
less than that holds nothing the smaller one lacks; the test split never chooses, so the
test IIA recorded at that k is not selected on. The same rule picks `k` when
`study.open_run(...).intervenable(variable)` is asked without one.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from study.analyses.das.alignments import trained
from study.core.atomic import atomic_dir

TOLERANCE = 0.01


def chosen_k(iia_by_k: dict[int, float]) -> int | None:
    """The smallest k whose IIA is within TOLERANCE of the best (NaN IIAs ignored); None when
    no k has a score."""
    scored = {k: v for k, v in iia_by_k.items() if v is not None and not math.isnan(v)}
    if not scored:
        return None
    best = max(scored.values())
    return min(k for k, v in scored.items() if v >= best - TOLERANCE)


def directory_name(alignment: str, variable: str, label: str) -> str:
    """`<alignment>/<variable>/<site label>` with `:` written `-` (portable names)."""
    return "/".join((alignment, variable.replace(":", "-"), label))


def export(model, rows: list[dict], kept: dict, out_dir, checkpoint: int) -> None:
    """Write `out_dir/pyvene/` (replacing an earlier one whole): for each (alignment,
    variable, site) of `rows` (das table rows) whose alignment is trained, the alignment at
    its chosen k, `kept[(alignment, variable, site label, k)]` (an instance), with
    `index.json` listing them."""
    from study.core.sites import site_key
    from study.models.sites.pyvene_bridge import save_intervenable, site_intervenable

    groups: dict = {}
    test_iia: dict = {}
    for r in rows:
        if r["alignment"] in trained():
            key = (r["alignment"], r["variable"], r["site"], int(r["layer"]), int(r["position"]))
            if r["split"] == "train":
                groups.setdefault(key, {})[int(r["k"])] = r["iia"]
            else:
                test_iia[key + (int(r["k"]),)] = r["iia"]
    index = []
    with atomic_dir(Path(out_dir) / "pyvene") as tmp:
        for (alignment, variable, kind, layer, position), by_k in sorted(groups.items()):
            label = site_key(kind, layer, position)
            k = chosen_k(by_k)
            inst = kept.get((alignment, variable, label, k))
            if inst is None:
                continue  # no k scored, or every restart was refused
            name = directory_name(alignment, variable, label)
            save_intervenable(site_intervenable(model, kind, layer, inst), tmp / name)
            index.append(dict(directory=name, alignment=alignment, variable=variable, site=kind,
                              layer=layer, position=position, label=label, k=k,
                              test_iia=test_iia.get((alignment, variable, kind, layer, position,
                                                     k), float("nan")),
                              checkpoint=checkpoint))
        (tmp / "index.json").write_text(json.dumps(index, indent=2) + "\n")
