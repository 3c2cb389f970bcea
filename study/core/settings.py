"""Declared settings: how a config field carries its help, how a group's config is resolved
from the command line, and how a config is rebuilt from JSON.

- `split_args(["a=1", "das.k=1,2"])` reads the key=value grammar of every command, and
  `fields_of(kv, "das")` picks one group's overrides by their prefix.
- `setting(default, help=...)` declares a field with its help text in the field's metadata
  (`describe` prints it); `nonfinite=True` lets a float field take nan/inf; `runtime=True`
  marks a setting that changes speed only, which never makes an analysis's tables stale and
  is spelt `runtime.NAME` on the command line whichever config reads it
  (`study/run/runtime_keys.py`; `runtime="NAME"` when the field has another name).
- `fixed(value, help=...)` declares a value the code holds fixed: no setting, still recorded
  with the run (config.json, a run's identity), so that runs made while it was one keep their
  hash; `derived(help=...)` one computed from the settings in `__post_init__` (`set_derived`).
- `resolve_group(cls, prefix, preset, overrides)`: defaults → scale preset → overrides
  (strings are coerced from the field's annotation); the one way every group (task, model,
  train, each analysis) gets its config. An unknown key names the valid ones.
- `from_json(cls, values, where)`: a config from its JSON dict (lists back to tuples by
  annotation); an unknown key is refused in one line naming `where` and the key, but for the
  settings a class lists as `retired` (folded into another); a fixed or derived value
  recorded otherwise than the code holds it is refused the same way.
- `describe_fields(cls)`: (name, type, default, help) of each field, from the declarations.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from pathlib import Path
from typing import Any

from study.core.coerce import coerce, field_types, type_name
from study.core.errors import UsageError

# the largest width or count of any model size setting: a larger layer (or more layers) would
# not fit in memory [ours]
MAX_WIDTH = 1 << 16


def setting(default: Any = dataclasses.MISSING, help: str = "", *,
            default_factory: Any = dataclasses.MISSING, nonfinite: bool = False,
            runtime: bool | str = False):
    """A dataclass field whose help (and whether it admits nan/inf) lives in its metadata.
    `runtime=True`: the setting changes how a result is computed (a chunk size, a batching
    switch, the device, a time budget), not the result: a run resumed or tables reused with
    another value are not stale (`runtime_fields`, `without_runtime`). The one way a speed-only
    setting is marked; it is spelt `runtime.<field>`, or `runtime.<runtime>` where `runtime`
    is a name (one name may stand for the like fields of several configs)."""
    if runtime:
        help = f"{help} [runtime: no part of a run's identity or of an analysis's settings]"
    metadata = {"help": help, "nonfinite": nonfinite, "runtime": runtime}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default: pass default_factory=")
    return dataclasses.field(default=default, metadata=metadata)


def fixed(value: Any, help: str):
    """A value the code holds fixed, declared where the config's settings are: not a setting
    (neither the command line nor `describe`'s count know it), still a field, so that the code
    reads it as before and config.json and a run's identity record it: runs made while it was
    a setting keep their hash. `help` says what it is and why it is fixed."""
    if isinstance(value, (list, dict, set)):
        raise TypeError("mutable fixed value")
    return dataclasses.field(default=value, init=False, metadata={"help": help, "fixed": True})


def derived(help: str):
    """A value computed from the settings (one concept that was two settings): no setting,
    recorded like a `fixed` one; the class's `__post_init__` sets it (`set_derived`)."""
    return dataclasses.field(default=None, init=False, metadata={"help": help, "fixed": True})


def set_derived(config, name: str, value: Any) -> None:
    """Set derived field `name` of a frozen config (from its `__post_init__`)."""
    object.__setattr__(config, name, value)


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
            raise UsageError(_unknown_key(prefix, name, fields))
        if isinstance(value, str):
            value = coerce(f"{prefix}.{name}", value, types_[name],
                           nonfinite=fields[name].metadata.get("nonfinite", False))
        values[name] = value
    try:
        return cls(**values)
    except TypeError as e:  # a preset naming no field: a programming error, still one line
        raise UsageError(f"{prefix}: {e}") from None


def _unknown_key(prefix: str, name: str, fields: dict[str, dataclasses.Field]) -> str:
    """"unknown key 'das.kk'; valid: ..." with the nearest spelling of a field (a speed-only
    one's under runtime.), and the valid keys."""
    spelt = {n: f"runtime.{runtime_name(f)}" if f.metadata.get("runtime") else f"{prefix}.{n}"
             for n, f in fields.items()}
    near = difflib.get_close_matches(name, list(spelt), n=1, cutoff=0.75)
    valid = [k for k in spelt.values() if not k.startswith("runtime.")]
    speed = [k for k in spelt.values() if k.startswith("runtime.")]
    return (f"unknown key '{prefix}.{name}'"
            + (f" (did you mean {spelt[near[0]]}=?)" if near else "")
            + f"; valid: {', '.join(valid)}" + (f" (and {', '.join(speed)})" if speed else ""))


def from_json(cls, values: dict, where: str, error: type[Exception] = UsageError):
    """`cls` from JSON values: lists become tuples where the annotation says tuple. A key that
    is no field of `cls` raises `error` naming `where` and the key, but for the class's
    `retired` settings (name -> what became of it), which are dropped. A fixed or derived
    field's recorded value must be the one the code gives it."""
    types_, kept = field_types(cls), fixed_fields(cls)
    retired = getattr(cls, "retired", {})
    unknown = sorted(set(values) - set(types_) - set(kept) - set(retired))
    if unknown:
        raise error(f"{where}: {cls.__name__} has no field(s) {', '.join(unknown)}; "
                    f"the code changed since it was written")
    config = cls(**{k: _from_json_value(types_[k], v) for k, v in values.items() if k in types_})
    for name in kept:
        if name in values:
            ours = json.loads(json.dumps(getattr(config, name)))
            if values[name] != ours:
                raise error(f"{where}: {name}={values[name]!r} was recorded, but this version "
                            f"holds it at {ours!r}; the code changed since it was written")
    return config


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
    runtime: str = ""  # the name under runtime.* of a speed-only setting, else ""


def describe_fields(cls) -> list[FieldInfo]:
    """Each init field's name, type, default, declared help and runtime name."""
    types_ = field_types(cls)
    out = []
    for name, f in _fields(cls).items():
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append(FieldInfo(name, type_name(types_[name]), default, _help(cls, name),
                             runtime_name(f) if f.metadata.get("runtime") else ""))
    return out


def fixed_fields(cls) -> tuple[str, ...]:
    """The fields of config class `cls` that are no settings (`fixed`, `derived`)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("fixed"))


def runtime_name(field: dataclasses.Field) -> str:
    """How a `runtime=True` field is spelt under `runtime.`: its declared name, else its own."""
    named = field.metadata.get("runtime")
    return named if isinstance(named, str) else field.name


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
