"""The fully resolved configuration of a run, and the key=value grammar that builds it.

`task=binding model=gpt12 scale=small train.lr=3e-4 seed=1`:
- `task=`, `model=` pick registry entries; `scale=` picks the preset of every group
  (paper | small | smoke), `GROUP.scale=` one group's (`das.scale=paper`: Grant et al.'s
  DAS on a small network); `analyses=a,b` names analyses to run after training (`none`:
  none; `run` without it runs the task's standard ones, `with_standard_analyses`).
- a task may set a model family's settings at a scale (`Task.family_presets`: binding's
  laptop variant of each family), applied over the scale's presets.
- dotted keys override fields: `task.X`, `model.X`, `train.X`, `<analysis>.X`; values are
  coerced from the field's annotation. Resolution order, the same for every group
  (`study.core.settings.resolve_group`): config defaults → scale preset → the task's
  preset for the family → overrides.
- `runtime.X` sets a speed-only setting, whichever group reads it (`runtime_keys.py`; the
  old spellings `train.device`, `das.eval_batch_size`, ... are still accepted).
Errors name the key, the value and what is allowed; nothing is written before it passes
(the device asked for and an estimate of the training memory are checked too, `preflight.py`).

A run's identity (its hash, its default directory, the "same run?" check on re-runs) is what
determines its weights; the runtime settings (`runtime.device`, `runtime.max_minutes`, ...)
may change between sessions and are only recorded.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from study.core import registry
from study.core.coerce import coerce
from study.core.errors import UsageError
from study.core.settings import did_you_mean, fields_of, from_json, resolve_group
from study.run.runtime_keys import PREFIX as RUNTIME
from study.run.runtime_keys import respell
from study.train.config import TrainConfig

TOP_KEYS = {
    "task": "task family (registry name)",
    "model": "model family (registry name)",
    "scale": "size preset of every group: paper | small | smoke",
    "seed": "training seed (model init, data order, dropout)",
    "run_dir": "put the run exactly here (default: runs/<task>-<model>-s<seed>-<hash8>)",
    "analyses": "comma-separated analyses to run after training; run's default: the task's "
                "standard ones (patching, DAS on its variables); none = train only",
    "force": "retrain even if the run directory holds a finished run",
}
GROUPS = ("task", "model", "train")
SEED_MAX = 2**32 - 1


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
    analysis_configs: dict = field(default_factory=dict)  # name -> the analysis's resolved config
    force: bool = False

    def identity(self) -> dict:
        """What determines the trained weights (and so the run's hash): everything but the
        runtime-only training settings."""
        return {**self._full_identity(), "train": without_runtime(dataclasses.asdict(self.train))}

    def _full_identity(self) -> dict:
        return {"task": self.task, "task_config": _identity_fields(self.task_config),
                "model": self.model, "model_config": dataclasses.asdict(self.model_config),
                "train": dataclasses.asdict(self.train), "seed": self.seed}

    def to_dict(self) -> dict:
        """config.json: the identity, plus every training setting for the record."""
        return {**self._full_identity(), "scale": self.scale, "analyses": list(self.analyses),
                "analysis_configs": {n: dataclasses.asdict(c) for n, c in self.analysis_configs.items()}}

    def hash8(self) -> str:
        return hash8(self.identity())

    def analysis_settings(self) -> dict[str, dict]:
        """Each asked analysis's resolved settings that decide its results, as its tables'
        `settings.json` holds them (the runtime-only ones left out: `result_settings`)."""
        return {n: result_settings(c) if (c := self.analysis_configs.get(n)) is not None else None
                for n in self.analyses}

    def default_run_dir(self) -> str:
        return f"runs/{self.task}-{self.model}-s{self.seed}-{self.hash8()}"

    @property
    def path(self) -> str:
        return self.run_dir or self.default_run_dir()


def _identity_fields(config) -> dict:
    """A task config's fields, less those its class added after runs were made
    (`unset_outside_identity`) while they are unset (None): older runs keep their hash."""
    d = dataclasses.asdict(config)
    for name in getattr(type(config), "unset_outside_identity", ()):
        if d.get(name) is None:
            d.pop(name, None)
    return d


def without_runtime(train: dict) -> dict:
    """Training settings without the runtime-only ones (`TrainConfig`'s `runtime=True`)."""
    from study.core.settings import without_runtime as drop
    return drop(TrainConfig, train)


def identity_of(saved: dict) -> dict:
    """The identity of the run a config.json describes (runtime-only settings left out)."""
    keys = ("task", "task_config", "model", "model_config", "train", "seed")
    out = {k: saved.get(k) for k in keys}
    if isinstance(out["train"], dict):
        out["train"] = without_runtime(out["train"])
    return out


def json_settings(config) -> dict:
    """A config dataclass as JSON reads it back (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def result_settings(config) -> dict:
    """`json_settings` without the fields declared `runtime=True` (speed only): the settings
    an analysis's tables are compared against before they are reused."""
    from study.core.settings import without_runtime as drop
    return drop(type(config), json_settings(config))


def hash8(identity: dict) -> str:
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def train_config(task_entry, scale: str, overrides: dict[str, str] | None = None) -> TrainConfig:
    """Training settings: defaults → the task's `train_presets[scale]` (`train.scale=S` picks
    another scale's) → overrides."""
    overrides = dict(overrides or {})
    scale = registry.own_scale("train", scale, overrides)
    return resolve_group(TrainConfig, "train", task_entry.obj.train_presets.get(scale), overrides)


def check_scale(scale: str) -> str:
    if scale not in registry.SCALES:
        raise UsageError(f"scale={scale!r} is not a scale; choose from {', '.join(registry.SCALES)}")
    return scale


def check_seed(text: str) -> int:
    seed = coerce("seed", text, int)
    if not 0 <= seed <= SEED_MAX:
        raise UsageError(f"seed={text!r}: expected a whole number in 0..{SEED_MAX}")
    return seed


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
    seed = check_seed(kv.pop("seed")) if "seed" in kv else 0
    run_dir = kv.pop("run_dir", None) or None
    force = coerce("force", kv.pop("force"), bool) if "force" in kv else False
    analyses = analysis_names_of(kv.pop("analyses", ""))
    kv = {**family_settings(task_entry, model_entry.name, scale, analyses, kv), **kv}

    analysis_names = set(registry.entries("analysis"))
    for key in kv:
        head = key.split(".", 1)[0]
        if "." not in key or head not in set(GROUPS) | analysis_names | {RUNTIME}:
            valid = ", ".join([*TOP_KEYS, "long"] + [g + ".<field>" for g in (*GROUPS, RUNTIME)]
                              + ["<analysis>.<field>"])
            raise UsageError(f"unknown key {key!r}{did_you_mean(key, [*TOP_KEYS, 'long'])}; "
                             f"valid keys: {valid}")
    kv = respell(kv, {"train", *analyses})

    task_cfg = task_entry.make_config(scale, fields_of(kv, "task"))
    model_cfg = model_entry.make_config(scale, fields_of(kv, "model"))
    train_cfg = train_config(task_entry, scale, fields_of(kv, "train"))
    rest = {k: v for k, v in kv.items() if k.split(".", 1)[0] not in GROUPS}
    configs = analysis_configs(analyses, scale, rest, task_entry, model_entry, model_cfg)
    cfg = RunConfig(task_entry.name, model_entry.name, task_cfg, model_cfg, train_cfg, scale,
                    seed, run_dir, analyses, configs, force)
    from study.run.build import build_task
    from study.run.preflight import check
    check(cfg, build_task(cfg))  # the data, the device, and training fits in memory
    return cfg


def analysis_names_of(text: str) -> tuple[str, ...]:
    """`analyses=a,b` -> ("a", "b"); `none` (or nothing) -> ()."""
    return () if text.strip() == "none" else tuple(a for a in text.split(",") if a)


def family_settings(task_entry, model: str, scale: str, analyses, given: dict) -> dict[str, str]:
    """The task's settings for model family `model` at `scale` (`Task.family_presets`: the
    variant the task's page documents), which the command line's `given` settings override:
    a group's keys only where that group runs at `scale` (`GROUP.scale=` picks another), an
    analysis's only where it is asked for."""
    preset = task_entry.obj.family_presets.get(scale, {}).get(model, {})
    out = {}
    for key, value in preset.items():
        group = key.split(".", 1)[0]
        if group not in GROUPS and group not in analyses:
            continue
        if given.get(f"{group}.scale", scale) != scale:
            continue
        out[key] = value
    return out


def with_standard_analyses(kv: dict[str, str]) -> dict[str, str]:
    """`run`'s settings: without `analyses=`, the task's standard analyses
    (`Task.standard_analyses`: patching and DAS on its variables at the scale's budget) under
    the command line's own; `analyses=none` trains only."""
    if "analyses" in kv or "task" not in kv:
        return dict(kv)
    entry = registry.get("task", kv["task"])  # an unknown task: one line with the choices
    return {**entry.obj.standard_analyses, **kv}


def analysis_configs(names, scale: str, overrides: dict[str, str], task_entry, model_entry,
                     model_config, have=()) -> dict:
    """Each named analysis's config (defaults → preset → `NAME.FIELD` overrides), checked
    against the model's capabilities and, through the analysis's `check`, the task's and the
    model's names, and each analysis it reads (`Entry.needs`) asked for before it or among
    `have` (those the run already holds) — all before anything is trained or written."""
    check_analyses(names, model_entry)
    overrides = respell(overrides, set(names))  # runtime.X: the fields of these analyses
    for key in overrides:
        head = key.split(".", 1)[0]
        if "." not in key or head not in names:
            raise UsageError(f"{key} given but analysis {head!r} is not among the analyses "
                             f"asked for ({', '.join(names) or 'none'})")
    out = {}
    for name in names:
        entry = registry.get("analysis", name)
        cfg = entry.make_config(scale, fields_of(overrides, name))
        if entry.check is not None:
            entry.check(cfg, task_entry.obj, model_entry, model_config)
        for need in (entry.needs(cfg) if entry.needs is not None else ()):
            if need not in out and need not in have:
                raise UsageError(f"analysis {name!r} reads the run's {need!r} results, which "
                                 f"it lacks: ask for {need} before it "
                                 f"(analyses={need},{name}), or analyze the run with {need} "
                                 f"first")
        out[name] = cfg
    return out


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


def from_dict(d: dict, where: str = "config.json") -> RunConfig:
    """Rebuild a RunConfig from config.json."""
    task_entry, model_entry = registry.get("task", d["task"]), registry.get("model", d["model"])
    analyses = tuple(d.get("analyses", ()))
    scale = d.get("scale", "paper")
    model_cfg = from_json(model_entry.config, d["model_config"], f"{where} model_config")
    configs = {n: from_json(registry.get("analysis", n).config, v, f"{where} analysis_configs.{n}")
               for n, v in d.get("analysis_configs", {}).items()}
    missing = [a for a in analyses if a not in configs]
    if missing:
        raise UsageError(f"{where}: analysis_configs has no settings for {', '.join(missing)} "
                         f"(listed under analyses); the file is damaged or from another version")
    return RunConfig(task_entry.name, model_entry.name,
                     from_json(task_entry.config, d["task_config"], f"{where} task_config"),
                     model_cfg, from_json(TrainConfig, d["train"], f"{where} train"),
                     scale, d["seed"], None, analyses, configs)
