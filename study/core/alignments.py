"""The registry of DAS alignments: each module of `study/analyses/das/alignments/` registers
one kind (`register_alignment`), so a new alignment is one file there (with its class, or one
from `study/analyses/das/alignment.py`), and the analysis, `compare` and the reports read its
name, order and label here. The registry lives in the kernel so that the reports, which import
no analysis, read it too; the kinds' modules are scanned by name on first use. They are cheap
to import (no torch at module level): `das.alignments`' default and its check read the
registry when the command line is parsed.

What a kind says of itself, in place of a list of names in each module that uses them:
- `order`: its place in `das.alignments`' default and so in the tables and reports;
- `seed_index`: which seeds it draws (fixed per kind, so adding a kind changes no other's);
- `make(embed_dim, k, seed, laf_form)`: a fresh seeded alignment;
- `help`: one line for the settings' help; `label`: its name in the reports' tables;
- `trained`: False for the control (one untrained draw per k, never searched), which every
  trained alignment is read against;
- `warm_start`: whether the search at k starts from its fit at the previous k;
- `lr_setting`: the `DasConfig` field of its constant learning rate (no decay), or None for
  the search's lr and its decay.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

PACKAGE = "study.analyses.das.alignments"  # one module per kind
# the alignment every other is read against and the default wherever one is asked for: DAS's
# orthogonal alignment (Geiger et al. 2024)
REFERENCE = "oaf"
_KINDS: dict[str, "AlignmentKind"] = {}


@dataclass(frozen=True)
class AlignmentKind:
    name: str
    order: int
    seed_index: int
    make: Callable  # (embed_dim, k, seed, laf_form) -> alignment
    help: str
    label: str
    trained: bool = True
    warm_start: bool = True
    lr_setting: str | None = None


def register_alignment(kind: AlignmentKind) -> AlignmentKind:
    existing = _KINDS.get(kind.name)
    if existing is not None and existing != kind:
        raise ValueError(f"alignment {kind.name!r} registered twice")
    _KINDS[kind.name] = kind
    return kind


def kinds() -> dict[str, AlignmentKind]:
    """Every registered alignment kind, in `order`."""
    from study.core.registry import scan
    scan(PACKAGE)
    return dict(sorted(_KINDS.items(), key=lambda item: (item[1].order, item[0])))


def get(name: str) -> AlignmentKind:
    """The kind called `name`; ValueError naming the known ones."""
    known = kinds()
    if name not in known:
        raise ValueError(f"alignment {name!r}: choose from {', '.join(known)}")
    return known[name]


def names() -> tuple[str, ...]:
    """Every alignment's name, in order: `das.alignments`' default."""
    return tuple(kinds())


def trained() -> tuple[str, ...]:
    """The searched alignments (every kind but the control), in order."""
    return tuple(n for n, k in kinds().items() if k.trained)


def control() -> str:
    """The control alignment (`random`, the untrained rotation): the one kind not trained."""
    untrained = [n for n, k in kinds().items() if not k.trained]
    if len(untrained) != 1:
        raise ValueError(f"one untrained alignment (the control) expected, found "
                         f"{', '.join(untrained) or 'none'}")
    return untrained[0]


def label_of(name: str) -> str:
    """How the reports name an alignment: its kind's label, else the name as it is (an
    alignment of an older run no longer registered)."""
    kind = kinds().get(name)
    return kind.label if kind is not None else name


def file_key(alignment: str, variable: str, site: str, k: int) -> str:
    """The name under which a fitted alignment is saved in a run's `alignments.safetensors`:
    `<alignment>/<variable>/<site label>/k=<k>` (its tensors under this key plus a suffix)."""
    return f"{alignment}/{variable}/{site}/k={int(k)}"


def parse_file_key(key: str) -> tuple[str, str, str, int] | None:
    """(alignment, variable, site label, k) of a `file_key`; None for any other name (a
    tensor's suffixed key, or another file's)."""
    import re
    m = re.match(r"^(?P<a>[^/]+)/(?P<v>.+)/(?P<s>[^/]+)/k=(?P<k>\d+)$", key)
    return None if m is None else (m["a"], m["v"], m["s"], int(m["k"]))
