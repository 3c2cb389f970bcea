"""The fully resolved configuration of a run, and the key=value grammar that builds it.

`task=binding model=gpt12 scale=small train.lr=3e-4 seed=1`:
- `task=`, `model=` pick registry entries; `scale=` picks the preset of every group
  (paper | small | smoke); `analyses=a,b` names analyses to run after training.
- dotted keys override fields: `task.X`, `model.X`, `train.X`; values are coerced from the
  field's annotation. Resolution order: config defaults → scale preset → overrides.
Errors name the key, the value and what is allowed; nothing is written before it passes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from study.core import registry
from study.core.coerce import coerce, field_types
from study.core.errors import UsageError
from study.train.config import TrainConfig

TOP_KEYS = {
    "task": "task family (registry name)",
    "model": "model family (registry name)",
    "scale": "size preset of every group: paper | small | smoke",
    "seed": "training seed (model init, data order, dropout)",
    "run_dir": "put the run exactly here (default: runs/<task>-<model>-s<seed>-<hash8>)",
    "analyses": "comma-separated analyses to run after training",
    "force": "retrain even if the run directory holds a finished run",
}
GROUPS = ("task", "model", "train")


@dataclass(frozen=True)
class RunConfig:
    task: str
    model: str
    task_config: Any
    model_config: Any
    train: TrainConfig
    scale: str = "paper"
    seed: int = 0
    run_dir: Optional[str] = None
    analyses: tuple[str, ...] = ()
    analysis_overrides: dict = field(default_factory=dict)  # "das.k" -> "1,2" (raw strings)
    force: bool = False

    def identity(self) -> dict:
        """What determines the trained weights (and so the run's hash)."""
        return {"task": self.task, "task_config": dataclasses.asdict(self.task_config),
                "model": self.model, "model_config": dataclasses.asdict(self.model_config),
                "train": dataclasses.asdict(self.train), "seed": self.seed}

    def to_dict(self) -> dict:
        return {**self.identity(), "scale": self.scale, "analyses": list(self.analyses),
                "analysis_overrides": dict(self.analysis_overrides)}

    def hash8(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:8]

    def default_run_dir(self) -> str:
        return f"runs/{self.task}-{self.model}-s{self.seed}-{self.hash8()}"

    @property
    def path(self) -> str:
        return self.run_dir or self.default_run_dir()


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


def group_config(entry, scale: str, overrides: dict[str, str], prefix: str):
    """Build an entry's config: defaults, scale preset, then coerced overrides."""
    types_ = field_types(entry.config)
    values = {}
    for key, text in overrides.items():
        name = key[len(prefix) + 1:]
        if name not in types_:
            raise UsageError(f"unknown key {key!r} for {prefix} {entry.name}; "
                             f"valid: {', '.join(prefix + '.' + n for n in types_)}")
        values[name] = coerce(key, text, types_[name])
    return entry.make_config(scale, values)


def train_config(task_entry, scale: str, overrides: dict[str, str]) -> TrainConfig:
    presets = getattr(task_entry.obj, "train_presets", {}) or {}
    types_ = field_types(TrainConfig)
    values = dict(presets.get(scale, {}))
    for key, text in overrides.items():
        name = key[len("train."):]
        if name not in types_:
            raise UsageError(f"unknown key {key!r}; valid: {', '.join('train.' + n for n in types_)}")
        values[name] = coerce(key, text, types_[name])
    return TrainConfig(**values)


def check_scale(scale: str) -> str:
    if scale not in registry.SCALES:
        raise UsageError(f"scale={scale!r} is not a scale; choose from {', '.join(registry.SCALES)}")
    return scale


def resolve(kv: dict[str, str]) -> RunConfig:
    """key=value pairs of `study run` -> RunConfig, or UsageError."""
    kv = dict(kv)
    for required in ("task", "model"):
        if required not in kv:
            known = ", ".join(registry.entries(required))
            raise UsageError(f"{required}= is required; choose from {known}")
    task_entry = registry.get("task", kv.pop("task"))
    model_entry = registry.get("model", kv.pop("model"))
    scale = check_scale(kv.pop("scale", "paper"))
    seed = coerce("seed", kv.pop("seed"), int) if "seed" in kv else 0
    run_dir = kv.pop("run_dir", None) or None
    force = coerce("force", kv.pop("force"), bool) if "force" in kv else False
    analyses = tuple(a for a in kv.pop("analyses", "").split(",") if a)

    analysis_names = set(registry.entries("analysis"))
    grouped: dict[str, dict[str, str]] = {g: {} for g in GROUPS}
    analysis_overrides: dict[str, str] = {}
    for key, value in kv.items():
        head = key.split(".", 1)[0]
        if "." in key and head in GROUPS:
            grouped[head][key] = value
        elif "." in key and head in analysis_names:
            analysis_overrides[key] = value
        else:
            valid = ", ".join(list(TOP_KEYS) + [g + ".<field>" for g in GROUPS] + ["<analysis>.<field>"])
            raise UsageError(f"unknown key {key!r}; valid keys: {valid}")

    task_cfg = group_config(task_entry, scale, grouped["task"], "task")
    model_cfg = group_config(model_entry, scale, grouped["model"], "model")
    train_cfg = train_config(task_entry, scale, grouped["train"])
    check_analyses(analyses, model_entry)
    for key in analysis_overrides:
        if key.split(".", 1)[0] not in analyses:
            raise UsageError(f"{key} given but analysis {key.split('.', 1)[0]!r} is not in analyses=")
    return RunConfig(task_entry.name, model_entry.name, task_cfg, model_cfg, train_cfg, scale,
                     seed, run_dir, analyses, analysis_overrides, force)


def check_analyses(names, model_entry) -> None:
    """Refuse, at parse time, an analysis the model's architecture cannot support."""
    for name in names:
        entry = registry.get("analysis", name)
        missing = entry.requires - model_entry.capabilities
        if missing:
            able = [m for m, e in registry.entries("model").items() if entry.requires <= e.capabilities]
            raise UsageError(f"analysis {name!r} needs a model with {', '.join(sorted(missing))}; "
                             f"model {model_entry.name!r} has {', '.join(sorted(model_entry.capabilities)) or 'none'}"
                             f" (models that qualify: {', '.join(able) or 'none'})")


def from_dict(d: dict) -> RunConfig:
    """Rebuild a RunConfig from config.json (lists back to tuples via the field types)."""
    task_entry, model_entry = registry.get("task", d["task"]), registry.get("model", d["model"])
    return RunConfig(task_entry.name, model_entry.name, build(task_entry.config, d["task_config"]),
                     build(model_entry.config, d["model_config"]), build(TrainConfig, d["train"]),
                     d.get("scale", "paper"), d["seed"], None, tuple(d.get("analyses", ())),
                     dict(d.get("analysis_overrides", {})))


def build(cls, values: dict):
    """A dataclass from JSON values: lists become tuples where the field is a tuple."""
    types_ = field_types(cls)
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in types_}
    return cls(**fixed)
