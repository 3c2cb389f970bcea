"""Values typed on the command line become the field's annotated type, or a clear error."""
from dataclasses import dataclass
from typing import Literal, Optional

import pytest

from study.core.coerce import coerce, field_types
from study.core.errors import UsageError


@dataclass(frozen=True)
class Demo:
    n: int = 1
    lr: float = 1e-3
    flag: bool = False
    name: str = "x"
    maybe: Optional[float] = None
    mode: Literal["a", "b"] = "a"
    betas: tuple[float, float] = (0.9, 0.99)
    ks: tuple[int, ...] = (1, 2)


T = field_types(Demo)


@pytest.mark.parametrize("key,text,expected", [
    ("n", "12", 12), ("n", "1e5", 100000), ("n", "10_000", 10000),
    ("lr", "3e-4", 3e-4), ("flag", "true", True), ("flag", "0", False),
    ("name", "hello", "hello"), ("maybe", "none", None), ("maybe", "0.5", 0.5),
    ("mode", "b", "b"), ("betas", "0.95,0.999", (0.95, 0.999)), ("ks", "1,2,4,16", (1, 2, 4, 16)),
    ("ks", "", ()),
])
def test_coerces_to_annotation(key, text, expected):
    assert coerce(key, text, T[key]) == expected


@pytest.mark.parametrize("key,text,allowed", [
    ("n", "1.5", "int"), ("n", "abc", "int"), ("flag", "maybe", "bool"),
    ("mode", "c", "one of a, b"), ("betas", "0.9", "comma-separated (float, float)"),
    ("ks", "1,x", "comma-separated ints"),
])
def test_bad_value_names_key_value_and_allowed(key, text, allowed):
    with pytest.raises(UsageError) as e:
        coerce(f"train.{key}", text, T[key])
    msg = str(e.value)
    assert f"train.{key}" in msg and repr(text) in msg and allowed in msg
