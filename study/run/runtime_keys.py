"""The `runtime.*` group: every setting that changes speed only, spelt `runtime.NAME` on the
command line and in study files, whichever config reads it.

A speed-only setting is declared where the code reads it, `setting(..., runtime=True)`
(`study.core.settings`): training's device, time budgets and kernels (`TrainConfig`), DAS's
`batch_restarts`, the forward-pass batch of every analysis (`eval_batch_size`, one name for
the like field of each analysis). The code chooses each unless it is given; none is part of a
run's identity or makes an analysis's tables stale.

The old spellings (`train.device`, `das.eval_batch_size`, `patching.batch_size`, ...) are
still accepted, so older study files and commands keep working: `respell` maps `runtime.NAME`
onto the fields it names, and refuses a field given both ways.
"""
from __future__ import annotations

import dataclasses

from study.core import registry
from study.core.coerce import coerce, field_types
from study.core.errors import UsageError
from study.core.settings import did_you_mean, runtime_name
from study.train.config import TrainConfig

PREFIX = "runtime"


@dataclasses.dataclass(frozen=True)
class Target:
    """One field a `runtime.NAME` key sets."""
    group: str  # its group's prefix: train, das, patching, ...
    config: type  # the group's config class
    field: str  # the field's name there (the old spelling is `group.field`)

    @property
    def old_key(self) -> str:
        return f"{self.group}.{self.field}"


def groups() -> list[tuple[str, type]]:
    """(prefix, config class) of every group that may declare runtime fields."""
    return [("train", TrainConfig)] + [(e.prefix, e.config)
                                       for e in registry.entries("analysis").values()]


def runtime_keys() -> dict[str, tuple[Target, ...]]:
    """runtime NAME -> the fields it sets, in declaration order (train's first)."""
    out: dict[str, list[Target]] = {}
    for prefix, cls in groups():
        for f in dataclasses.fields(cls):
            if f.metadata.get("runtime"):
                out.setdefault(runtime_name(f), []).append(Target(prefix, cls, f.name))
    return {name: tuple(targets) for name, targets in out.items()}


def spelling(group: str, field: str) -> str:
    """How `group.field` is spelt on the command line: `runtime.NAME` for a runtime field."""
    for name, targets in runtime_keys().items():
        if any(t.group == group and t.field == field for t in targets):
            return f"{PREFIX}.{name}"
    return f"{group}.{field}"


def respell(kv: dict[str, str], present) -> dict[str, str]:
    """`kv` with every `runtime.NAME=V` turned into `GROUP.FIELD=V` for each field it names
    whose group is in `present` (the run's groups: train and the asked analyses). V is checked
    against every field it names, present or not. A field given both ways, or an unknown
    `runtime.X`, is refused in one line."""
    keys = runtime_keys()
    out = {k: v for k, v in kv.items() if not k.startswith(PREFIX + ".")}
    for key, value in kv.items():
        if not key.startswith(PREFIX + "."):
            continue
        name = key[len(PREFIX) + 1:]
        if name not in keys:
            valid = [f"{PREFIX}.{n}" for n in keys]
            raise UsageError(f"unknown key {key!r}{did_you_mean(key, valid)}; valid: "
                             f"{', '.join(valid)}")
        for t in keys[name]:
            if isinstance(value, str):
                coerce(key, value, field_types(t.config)[t.field])
            if t.group not in present:
                continue
            if t.old_key in out:
                raise UsageError(f"{key} and {t.old_key} name one setting; give it once, "
                                 f"as {key}")
            out[t.old_key] = value
    return out
