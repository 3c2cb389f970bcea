"""The registry of DAS alignments: each module of this package registers one kind
(`register_alignment`), so a new alignment is one file here (with its class, or one from
`study/analyses/das/alignment.py`). Modules are cheap to import (no torch at module level):
`das.alignments`' default and its check read the registry when the command line is parsed.

What a kind says of itself, in place of a list of names in each module that uses them:
- `order`: its place in `das.alignments`' default and so in the tables;
- `seed_index`: which seeds it draws (fixed per kind, so adding a kind changes no other's);
- `make(embed_dim, k, seed, laf_form)`: a fresh seeded alignment;
- `trained`: False for a control (one untrained draw per k, never searched);
- `warm_start`: whether the search at k starts from its fit at the previous k;
- `lr_setting`: the `DasConfig` field of its constant learning rate (no decay), or None for
  the search's lr and its decay.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

_KINDS: dict[str, "AlignmentKind"] = {}


@dataclass(frozen=True)
class AlignmentKind:
    name: str
    order: int
    seed_index: int
    make: Callable  # (embed_dim, k, seed, laf_form) -> alignment
    help: str
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
    scan(__name__)
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
    """The searched alignments (every kind but the controls), in order."""
    return tuple(n for n, k in kinds().items() if k.trained)
