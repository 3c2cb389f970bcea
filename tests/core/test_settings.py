"""One way to a group's config (defaults → preset → coerced overrides), one way back from
JSON, and help that lives in each field's declaration."""
import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar, Optional

import pytest

from study.core import registry
from study.core.errors import UsageError
from study.core.settings import (derived, describe_fields, fixed, from_json, resolve_group,
                                 set_derived, setting)
from study.train.config import TrainConfig


@dataclass(frozen=True)
class Demo:
    n: int = setting(1, "how many")
    lr: float = setting(1e-3, "step size")
    ks: tuple[int, ...] = setting((1, 2), "sizes")
    span: Optional[tuple[float, float]] = setting(None, "a range")
    limit: float = setting(float("inf"), "may be infinite", nonfinite=True)


@dataclass(frozen=True)
class Child(Demo):
    n: int = 5  # only the default changes


@dataclass(frozen=True)
class Held:
    width: int = setting(8, "a setting")
    floor: float = fixed(0.5, "a value the code holds fixed")
    half: int = derived("width // 2")
    retired: ClassVar[dict[str, str]] = {"depth": "folded into width"}

    def __post_init__(self):
        set_derived(self, "half", self.width // 2)


def test_resolution_order_is_defaults_then_preset_then_overrides():
    assert resolve_group(Demo, "demo") == Demo()
    assert resolve_group(Demo, "demo", {"n": 2, "lr": 0.5}).n == 2
    cfg = resolve_group(Demo, "demo", {"n": 2, "lr": 0.5}, {"n": "7", "ks": "4,8"})
    assert (cfg.n, cfg.lr, cfg.ks) == (7, 0.5, (4, 8))
    assert resolve_group(Demo, "demo", None, {"ks": (3,)}).ks == (3,)  # typed values pass


def test_unknown_key_names_the_valid_ones():
    with pytest.raises(UsageError, match=r"unknown key 'demo.bogus'; valid: demo.n, demo.lr"):
        resolve_group(Demo, "demo", None, {"bogus": "1"})


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1,nan"])
def test_non_finite_floats_are_refused_unless_the_field_allows_them(text):
    key = "ks" if "," in text else "lr"
    with pytest.raises(UsageError, match=f"demo.{key}="):
        resolve_group(Demo, "demo", None, {key: text})
    assert resolve_group(Demo, "demo", None, {"limit": "inf"}).limit == float("inf")


def test_an_int_given_in_exponent_form_or_too_large_is_one_line():
    assert resolve_group(Demo, "demo", None, {"n": "1e3"}).n == 1000
    assert resolve_group(Demo, "demo", None, {"n": str(10**30)}).n == 10**30  # exact
    with pytest.raises(UsageError, match="demo.n='1e999'"):
        resolve_group(Demo, "demo", None, {"n": "1e999"})


def test_json_round_trip_restores_tuples_and_refuses_unknown_keys():
    cfg = Demo(ks=(4, 5), span=(0.1, 0.2))
    values = json.loads(json.dumps(dataclasses.asdict(cfg)))
    assert from_json(Demo, values, "x.json") == cfg
    with pytest.raises(UsageError, match=r"x.json: Demo has no field\(s\) width"):
        from_json(Demo, {**values, "width": 3}, "x.json")


def test_a_near_miss_of_a_groups_key_is_named_and_a_speed_only_one_by_its_runtime_name():
    with pytest.raises(UsageError, match=r"unknown key 'demo.lim' \(did you mean demo.limit=\?\)"):
        resolve_group(Demo, "demo", None, {"lim": "1"})
    with pytest.raises(UsageError, match=r"did you mean runtime.device=\?\)"):
        resolve_group(TrainConfig, "train", None, {"devise": "cpu"})


def test_fixed_and_derived_values_are_recorded_but_are_no_settings():
    """A value the code holds fixed, or derives from the settings, is no setting (refused on
    the command line, not described) but is recorded like one (asdict, so a run's identity
    and config.json keep it); read back, a recorded value other than the code's is refused
    and a retired setting is dropped."""
    cfg = resolve_group(Held, "held", None, {"width": "6"})
    assert dataclasses.asdict(cfg) == {"width": 6, "floor": 0.5, "half": 3}
    assert [f.name for f in describe_fields(Held)] == ["width"]
    for key in ("floor", "half"):
        with pytest.raises(UsageError, match=f"unknown key 'held.{key}'"):
            resolve_group(Held, "held", None, {key: "1"})
    values = json.loads(json.dumps(dataclasses.asdict(cfg)))
    assert from_json(Held, {**values, "depth": 3}, "x.json") == cfg
    with pytest.raises(UsageError, match=r"x.json: floor=0.25 was recorded, but this version holds it at 0.5"):
        from_json(Held, {**values, "floor": 0.25}, "x.json")
    with pytest.raises(UsageError, match=r"x.json: half=4 was recorded"):
        from_json(Held, {**values, "half": 4}, "x.json")


def test_help_comes_from_the_declaration_and_survives_a_changed_default():
    infos = {f.name: f for f in describe_fields(Child)}
    assert infos["n"].help == "how many" and infos["n"].default == 5
    assert infos["ks"].type == "comma-separated ints"


def _all_configs():
    out = [("train", TrainConfig)]
    for kind in registry.KINDS:
        out += [(f"{kind} {n}", e.config) for n, e in registry.entries(kind).items()]
    return out


@pytest.mark.parametrize("name,cls", _all_configs(), ids=[n for n, _ in _all_configs()])
def test_every_setting_has_help(name, cls):
    missing = [f.name for f in describe_fields(cls) if not f.help]
    assert not missing, f"{name}: no help for {missing}"


def test_every_preset_resolves_to_a_valid_config():
    for kind in registry.KINDS:
        for entry in registry.entries(kind).values():
            for scale in registry.SCALES:
                entry.make_config(scale)
    from study.run.config import train_config
    for entry in registry.entries("task").values():
        for scale in registry.SCALES:
            train_config(entry, scale)
