"""Which of a run's saved DAS sites a comparison reads (`compare.site`).

A run's DAS may have aligned a variable at several sites (a transformer's middle and last
residual stream; several positions). Every comparison reads one site per run, variable and k:

- `best` (the default) [ours]: the site whose alignment (`compare.alignment`) has the best
  *training* IIA at that k in the run's das table, as the verdict chooses, so each network is
  read where it holds the variable best (test IIA would bias the choice upward);
- `first` / `last`: the shallowest / deepest saved layer (then the earliest position);
- site keys in order of preference (`state@21,resid[2]@21`, as DAS saves them: `kind[layer]@
  position`, position `pair` for the pair's own): each run is read at the first of them it
  saved, so that runs of different architectures are read at matched positions;
- `atlas` [ours]: each run at *its own* atlas cell for the variable (`study.analyses.atlas`:
  the token role, site and layer of the variable's full row), through the OAF the atlas saved
  there at every k of its ladder (`RUN/analyses/atlas/alignments.safetensors`, keyed as das
  keys its own). Each run is then read, and written, at its role's position in each base and
  source (`paired.RolePairs`), so that networks that hold one variable at different tokens
  are compared where each holds it. A run without an atlas, or one without a full row for a
  compared variable, is refused before anything is computed (`atlas_cells`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from study.core.errors import UsageError
from study.core.sites import parse_site_key, site_key

RULES = ("best", "first", "last", "atlas")
ATLAS = ("atlas",)  # the rule that reads each run at its own atlas cell
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


@dataclass(frozen=True)
class AtlasCell:
    """Where the atlas holds a variable in one run: its full row's token role and the site
    key its alignment is saved under ("resid[1]@pair": the pairs at the role's positions)."""

    role: str
    label: str


def no_atlas(run: str, why: str) -> UsageError:
    """The one-line refusal of a run that compare.site=atlas cannot read."""
    return UsageError(f"compare.site=atlas: {run} {why}; run `python -m study analyze {run} "
                      f"analysis=atlas` first (or choose compare.site=best|first|last|KEYS)")


def atlas_cells(alignments: Path, checkpoint: int, alignment: str, run: str
                ) -> dict[str, AtlasCell]:
    """variable -> its atlas cell in one run at `checkpoint`: the full row of the atlas table
    beside `alignments` (the atlas's saved alignments file) whose site and layer are those the
    `alignment` of the variable was saved at (the first such row: the best cell's, which the
    atlas saves). Variables saved without a full row are left out. A UsageError naming the run
    where it has no atlas table or alignments."""
    import pandas as pd
    from safetensors import safe_open

    from study.core.alignments import parse_file_key

    path = Path(alignments)
    table = path.parent / "atlas.parquet"
    if not table.is_file() or not path.is_file():
        raise no_atlas(run, "has no atlas (analyses/atlas/atlas.parquet and "
                            "alignments.safetensors)")
    saved: dict[str, set[str]] = {}
    with safe_open(str(path), framework="numpy") as f:
        for key in f.keys():
            parsed = parse_file_key(key)
            if parsed and parsed[0] == alignment:
                saved.setdefault(parsed[1], set()).add(parsed[2])
    df = pd.read_parquet(table)
    full = df[(df["stage"] == "full") & (df["checkpoint"] == checkpoint)]
    out: dict[str, AtlasCell] = {}
    for r in full.itertuples():
        label = site_key(r.site, int(r.layer), -1)
        if r.variable not in out and label in saved.get(r.variable, ()):
            out[r.variable] = AtlasCell(str(r.role), label)
    return out


def check_atlas(cells: dict[str, AtlasCell], variables, run: str) -> None:
    """A UsageError naming the run unless its atlas has a full row for each of `variables`."""
    for variable in variables:
        if variable not in cells:
            raise no_atlas(run, f"has no full atlas row for {variable!r} (its atlas holds "
                                f"{', '.join(sorted(cells)) or 'none'})")
