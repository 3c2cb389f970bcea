"""Declared settings: how a config field carries its help, how a group's config is resolved
from the command line, and how a config is rebuilt from JSON.

- `split_args(["a=1", "das.k=1,2"])` reads the key=value grammar of every command, and
  `fields_of(kv, "das")` picks one group's overrides by their prefix.
- `setting(default, help=...)` declares a field with its help text in the field's metadata
  (`describe` prints it); `nonfinite=True` lets a float field take nan/inf; `runtime=True`
  marks a setting that changes speed only, which never makes an analysis's tables stale.
- `resolve_group(cls, prefix, preset, overrides)`: defaults → scale preset → overrides
  (strings are coerced from the field's annotation); the one way every group (task, model,
  train, each analysis) gets its config. An unknown key names the valid ones.
- `from_json(cls, values, where)`: a config from its JSON dict (lists back to tuples by
  annotation); an unknown key is refused in one line naming `where` and the key.
- `describe_fields(cls)`: (name, type, default, help) of each field, from the declarations.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from study.core.coerce import coerce, field_types, type_name
from study.core.errors import UsageError


def setting(default: Any = dataclasses.MISSING, help: str = "", *,
            default_factory: Any = dataclasses.MISSING, nonfinite: bool = False,
            runtime: bool = False):
    """A dataclass field whose help (and whether it admits nan/inf) lives in its metadata.
    `runtime=True`: the setting changes how a result is computed (a chunk size, a batching
    switch, the device, a time budget), not the result: a run resumed or tables reused with
    another value are not stale (`runtime_fields`, `without_runtime`). The one way a speed-only
    setting is marked."""
    if runtime:
        help = f"{help} [runtime: speed only, results unchanged]"
    metadata = {"help": help, "nonfinite": nonfinite, "runtime": runtime}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default: pass default_factory=")
    return dataclasses.field(default=default, metadata=metadata)


def split_args(args: list[str]) -> dict[str, str]:
    """['a=1', 'b.c=2'] -> {'a': '1', 'b.c': '2'}; a bare word or a repeated key is an error."""
    out: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise UsageError(f"argument {arg!r} is not of the form key=value")
        if key in out:
            raise UsageError(f"{key} given twice ({out[key]!r} and {value!r})")
        out[key] = value
    return out


def did_you_mean(key: str, valid) -> str:
    """" (did you mean analyses=?)" for a key a letter or two off a valid one, else ""."""
    import difflib
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.75)
    return f" (did you mean {match[0]}=?)" if match else ""


def split_dirs_and_args(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """['runs/a', 'out=x', 'runs/b'] -> (['runs/a', 'runs/b'], {'out': 'x'}): the run
    directories (bare words, or existing directories whose name holds '=') and the key=value
    options, as `split_args` reads them."""
    dirs, options = [], []
    for a in args:
        (dirs if "=" not in a or Path(a).is_dir() else options).append(a)
    return dirs, split_args(options)


def fields_of(kv: dict[str, str], prefix: str) -> dict[str, str]:
    """{'das.k': '1,2', 'seed': '0'} -> {'k': '1,2'} for prefix 'das'."""
    return {k[len(prefix) + 1:]: v for k, v in kv.items() if k.startswith(prefix + ".")}


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def resolve_group(cls, prefix: str, preset: dict | None = None, overrides: dict | None = None):
    """`cls` from its defaults, then `preset` (typed values), then `overrides` (field name ->
    string from the command line, coerced from the annotation, or an already typed value).
    Errors are one-line UsageErrors naming `prefix.field`."""
    types_, fields = field_types(cls), _fields(cls)
    values = dict(preset or {})
    for name, value in (overrides or {}).items():
        if name not in types_:
            raise UsageError(f"unknown key '{prefix}.{name}'; valid: "
                             f"{', '.join(prefix + '.' + n for n in types_)}")
        if isinstance(value, str):
            value = coerce(f"{prefix}.{name}", value, types_[name],
                           nonfinite=fields[name].metadata.get("nonfinite", False))
        values[name] = value
    try:
        return cls(**values)
    except TypeError as e:  # a preset naming no field: a programming error, still one line
        raise UsageError(f"{prefix}: {e}") from None


def from_json(cls, values: dict, where: str, error: type[Exception] = UsageError):
    """`cls` from JSON values: lists become tuples where the annotation says tuple. A key that
    is no field of `cls` raises `error` naming `where` and the key."""
    types_ = field_types(cls)
    unknown = sorted(set(values) - set(types_))
    if unknown:
        raise error(f"{where}: {cls.__name__} has no field(s) {', '.join(unknown)}; "
                    f"the code changed since it was written")
    return cls(**{k: _from_json_value(types_[k], v) for k, v in values.items()})


def _from_json_value(hint, value):
    if not isinstance(value, list):
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if typing.get_origin(a) in (tuple, list) or a in (tuple, list)]
        return _from_json_value(arms[0], value) if arms else value
    if origin is tuple or hint is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_json_value(args[0], v) for v in value)
        if args and len(args) == len(value):
            return tuple(_from_json_value(a, v) for a, v in zip(args, value))
        return tuple(value)
    if origin is list and args:
        return [_from_json_value(args[0], v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    name: str
    type: str
    default: Any
    help: str


def describe_fields(cls) -> list[FieldInfo]:
    """Each init field's name, type, default and declared help."""
    types_ = field_types(cls)
    out = []
    for name, f in _fields(cls).items():
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append(FieldInfo(name, type_name(types_[name]), default, _help(cls, name)))
    return out


def runtime_fields(cls) -> tuple[str, ...]:
    """The fields of config class `cls` declared `runtime=True` (how a result is computed,
    not what it is), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("runtime"))


def without_runtime(cls, values: dict) -> dict:
    """`values` (a config of class `cls` as a dict) without its `runtime=True` fields: what
    a result depends on, compared before a run is resumed or a table reused."""
    skip = set(runtime_fields(cls))
    return {k: v for k, v in values.items() if k not in skip}


def _help(cls, name: str) -> str:
    """A field's declared help; a subclass that only changes a default keeps its base's."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass):
            f = {g.name: g for g in dataclasses.fields(klass)}.get(name)
            if f is not None and f.metadata.get("help"):
                return f.metadata["help"]
    return ""
