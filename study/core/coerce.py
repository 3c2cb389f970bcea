"""Turn a command-line string into a value of a dataclass field's annotated type.

Supports int, float, bool, str, Optional[...], Literal[...], tuple[T, ...] and tuple[A, B]
(comma-separated). Errors name the key, the value given and what is allowed.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from study.core.errors import UsageError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def field_types(cls) -> dict[str, Any]:
    """Resolved annotations of a dataclass's init fields (handles `from __future__` strings)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def type_name(tp) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(type_name(a) for a in inner) + (" or none" if len(inner) < len(args) else "")
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"comma-separated {type_name(args[0])}s"
        return "comma-separated (" + ", ".join(type_name(a) for a in args) + ")"
    return getattr(tp, "__name__", str(tp))


def coerce(key: str, text: str, tp, *, nonfinite: bool = False) -> Any:
    """Parse `text` as `tp`, or raise UsageError naming `key`; nan/inf are refused unless
    `nonfinite`."""
    try:
        value = _coerce(text, tp)
    except (ValueError, TypeError, OverflowError):
        raise UsageError(f"{key}={text!r}: expected {type_name(tp)}") from None
    if not nonfinite and not _finite(value):
        raise UsageError(f"{key}={text!r}: expected a finite {type_name(tp)} (no nan or inf)")
    return value


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, tuple):
        return all(_finite(v) for v in value)
    return True


def _coerce(text: str, tp) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        for a in args:
            if str(a) == text or (isinstance(a, bool) and text.lower() in (_TRUE if a else _FALSE)):
                return a
        raise ValueError(text)
    if origin in (Union, types.UnionType):
        if type(None) in args and text.lower() in ("none", "null", ""):
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(text, a)
            except (ValueError, TypeError):
                continue
        raise ValueError(text)
    if origin is tuple:
        parts = [p.strip() for p in text.split(",")] if text.strip() else []
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(p, args[0]) for p in parts)
        if len(parts) != len(args):
            raise ValueError(text)
        return tuple(_coerce(p, a) for p, a in zip(parts, args))
    if tp is bool:
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(text)
    if tp is int:
        try:
            return int(text.replace("_", ""))  # exact, however large; 100_000
        except ValueError:
            value = float(text.replace("_", ""))  # accepts 1e5
        if not value.is_integer():
            raise ValueError(text)
        return int(value)
    if tp is float:
        return float(text)
    if tp is str:
        return text
    if tp is Any:
        return text
    raise TypeError(f"unsupported field type {tp}")
