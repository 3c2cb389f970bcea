"""Report sections: each module here registers one `@section(...)` function that turns the
runs of one task into figures. A new chart is a new file in this package; modules whose
names start with `_` are helpers and are not scanned."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

_SECTIONS: dict[str, "SectionEntry"] = {}


@dataclass(frozen=True)
class SectionEntry:
    name: str
    title: str
    order: int  # position in the report, ascending
    build: Callable  # (runs: list[RunTables]) -> list[Figure], runs all of one task


def section(name: str, title: str, order: int) -> Callable:
    def deco(fn):
        if name in _SECTIONS and _SECTIONS[name].build is not fn:
            raise ValueError(f"report section {name!r} registered twice")
        _SECTIONS[name] = SectionEntry(name, title, order, fn)
        return fn
    return deco


def sections() -> list[SectionEntry]:
    from study.core.registry import scan
    scan(__name__)
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.name))
