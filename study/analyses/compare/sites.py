"""Which of a run's saved DAS sites a comparison reads (`compare.site`).

A run's DAS may have aligned a variable at several sites (a transformer's middle and last
residual stream; several positions). Every comparison reads one site per run, variable and k:

- `best` (the default) [ours]: the site whose alignment (`compare.alignment`) has the best
  *training* IIA at that k in the run's das table, as the verdict chooses, so each network is
  read where it holds the variable best (test IIA would bias the choice upward);
- `first` / `last`: the shallowest / deepest saved layer (then the earliest position);
- site keys in order of preference (`state@21,resid[2]@21`, as DAS saves them: `kind[layer]@
  position`, position `pair` for the pair's own): each run is read at the first of them it
  saved, so that runs of different architectures are read at matched positions.
"""
from __future__ import annotations

import re
from pathlib import Path

from study.core.errors import UsageError
from study.core.sites import parse_site_key, site_key

RULES = ("best", "first", "last")
_KEY = re.compile(r"^[a-z_]+(\[\d+\])?@(pair|\d+)$")


def check_site_setting(values: tuple[str, ...]) -> None:
    """UsageError unless `values` is one rule or a list of site keys."""
    if not values:
        raise UsageError(f"compare.site is empty: give one of {', '.join(RULES)} or site keys "
                         f"such as state@21,resid[2]@21")
    rules = [v for v in values if v in RULES]
    if rules and len(values) > 1:
        raise UsageError(f"compare.site={','.join(values)}: {rules[0]} stands alone; give one "
                         f"of {', '.join(RULES)} or a list of site keys")
    bad = [v for v in values if v not in RULES and not _KEY.match(v)]
    if bad:
        raise UsageError(f"compare.site: {bad[0]!r} is neither {', '.join(RULES)} nor a site key "
                         f"(kind[layer]@position, e.g. resid[2]@pair, state@21)")


def _order(label: str) -> tuple[int, int, str]:
    kind, layer, position = parse_site_key(label)
    return layer, position if position >= 0 else 10**9, kind


def train_iia(das_table: Path, checkpoint: int, alignment: str, variable: str, k: int
              ) -> dict[str, float]:
    """site key -> the alignment's training IIA at k, from a run's das table."""
    import pandas as pd
    if not das_table.is_file():
        return {}
    df = pd.read_parquet(das_table)
    df = df[(df["checkpoint"] == checkpoint) & (df["alignment"] == alignment)
            & (df["variable"] == variable) & (df["k"] == k) & (df["split"] == "train")]
    return {site_key(r.site, int(r.layer), int(r.position)): float(r.iia)
            for r in df.itertuples() if pd.notna(r.iia)}


def choose_site(saved: list[str], rule: tuple[str, ...], run: str, scores=None) -> str:
    """The site key to read among `saved` (the keys saved for one alignment, variable and
    k); `scores()`: site key -> training IIA, read only for `best`."""
    ordered = sorted(saved, key=_order)
    if rule == ("first",):
        return ordered[0]
    if rule == ("last",):
        return max(ordered, key=lambda s: _order(s)[0])
    if rule == ("best",):
        if len(ordered) == 1:
            return ordered[0]
        iia = scores() if scores else {}
        known = [s for s in ordered if s in iia]
        if not known:
            raise UsageError(f"compare.site=best: {run} has no training IIA for its sites "
                             f"{', '.join(ordered)} in its das table; choose one with "
                             f"compare.site=KEY or first|last")
        return max(known, key=lambda s: iia[s])  # the first of equals: the shallowest
    for key in rule:
        if key in saved:
            return key
    raise UsageError(f"compare.site={','.join(rule)}: {run} saved none of these; it saved "
                     f"{', '.join(ordered)}")
