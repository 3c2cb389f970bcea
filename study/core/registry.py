"""Registries of tasks, model families and analyses.

Adding an entry is one new file in `study/tasks/`, `study/models/` or `study/analyses/` whose module applies
`register(...)`; the packages are scanned on first use, so no central list is edited.
Registration files must stay cheap to import (no torch at module level) so that
`python -m study list` answers quickly; heavy imports belong inside functions.

Capabilities (models) and requirements (analyses) are names from
`study.core.network.CAPABILITIES`; an unknown name is refused at registration. A model
family's registered object is its builder wrapped by `network.checked_builder`: every network
it builds carries the family's capabilities and is checked against the network contract.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from study.core import network
from study.core.errors import UsageError

KINDS = ("task", "model", "analysis")
PACKAGES = {"task": "study.tasks", "model": "study.models", "analysis": "study.analyses"}
SCALES = ("paper", "small", "smoke")


@dataclass(frozen=True)
class Entry:
    """One registered task, model family or analysis."""

    kind: str
    name: str
    obj: Any  # the task class, the (checked) model builder or the analysis function
    config: type  # frozen dataclass of its settings; defaults are the paper's values
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)  # scale -> overrides
    capabilities: frozenset[str] = frozenset()  # models: what they offer
    requires: frozenset[str] = frozenset()  # analyses: what they need from a model
    help: str = ""
    # analyses: `check(config, task_cls, model_entry, model_config)` refuses, before any
    # training, names that depend on the task or the model (a causal variable, a site kind,
    # a layer); None: no check
    check: Callable | None = None
    # analyses: `needs(config)` -> the names of the analyses of the same run whose results it
    # reads (`AnalysisContext.analysis_dir`): each must have run before it, or be asked for
    # ahead of it (refused when the command line is parsed); None: it reads none
    needs: Callable | None = None

    @property
    def prefix(self) -> str:
        """How its settings are spelt on the command line: `task.`, `model.`, `das.`."""
        return self.name if self.kind == "analysis" else self.kind

    def make_config(self, scale: str, overrides: dict[str, Any] | None = None):
        """Defaults, then the scale preset, then `overrides` (strings are coerced); an
        override `scale` picks this group's preset instead of `scale` (`das.scale=paper`)."""
        from study.core.settings import resolve_group
        overrides = dict(overrides or {})
        scale = own_scale(self.prefix, scale, overrides)
        return resolve_group(self.config, self.prefix, self.presets.get(scale), overrides)


def own_scale(prefix: str, scale: str, overrides: dict[str, Any]) -> str:
    """The scale whose preset a group takes: `overrides`' own `scale` (popped from it: the
    key `GROUP.scale=S`), else the run's `scale`."""
    own = overrides.pop("scale", scale)
    if own not in SCALES:
        raise UsageError(f"{prefix}.scale={own!r} is not a scale; choose from {', '.join(SCALES)}")
    return own


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_SCANNED: set[str] = set()


def register(kind: str, name: str, *, config: type, presets: dict | None = None,
             capabilities=(), requires=(), help: str = "", check: Callable | None = None,
             needs: Callable | None = None) -> Callable:
    """Decorator: `@register("task", "binding", config=BindingConfig, presets=...)`."""
    if kind not in KINDS:
        raise ValueError(f"unknown registry kind {kind!r}")
    if not dataclasses.is_dataclass(config) or not config.__dataclass_params__.frozen:
        raise TypeError(f"{name}: config must be a frozen dataclass")
    for scale in presets or {}:
        if scale not in SCALES:
            raise ValueError(f"{name}: preset scale {scale!r} not one of {SCALES}")
    if capabilities and kind != "model":
        raise ValueError(f"{name}: only models declare capabilities")
    if requires and kind != "analysis":
        raise ValueError(f"{name}: only analyses declare requirements")
    capabilities = network.check_capability_names(capabilities, f"{kind} {name!r}")
    requires = network.check_capability_names(requires, f"{kind} {name!r}")

    def deco(obj):
        existing = _REGISTRY[kind].get(name)
        if existing is not None and getattr(existing.obj, "__wrapped__", existing.obj) is not obj:
            raise ValueError(f"{kind} {name!r} registered twice")
        doc = help or summary(obj.__doc__)
        stored = network.checked_builder(obj, capabilities) if kind == "model" else obj
        _REGISTRY[kind][name] = Entry(kind, name, stored, config, dict(presets or {}),
                                      capabilities, requires, doc, check, needs)
        return stored

    return deco


def scan(package_name: str) -> None:
    """Import every module and subpackage of `package_name` whose name does not start with
    `_` (those are helpers): the one plugin scanner, so that registering an entry (a task, a
    model family, an analysis, a report section) is adding one file. Imports are cached, so a
    second scan costs nothing."""
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):  # a module, or a package (an analysis with helpers)
            importlib.import_module(f"{package.__name__}.{info.name}")


def _scan(kind: str) -> None:
    if kind in _SCANNED:
        return
    scan(PACKAGES[kind])
    _SCANNED.add(kind)


def entries(kind: str) -> dict[str, Entry]:
    _scan(kind)
    return dict(sorted(_REGISTRY[kind].items()))


def summary(docstring: str | None) -> str:
    """A docstring's first paragraph on one line: what `list` and `describe` show of an entry
    (its first line alone would often stop mid-sentence)."""
    paragraph = (docstring or "").strip().split("\n\n")[0]
    return " ".join(line.strip() for line in paragraph.splitlines())


def builtin(kind: str) -> dict[str, Entry]:
    """The entries of `kind` that the project's own package registers, without the ones a
    script or a test registered beside them."""
    package = PACKAGES[kind]
    return {name: e for name, e in entries(kind).items()
            if getattr(e.obj, "__module__", "").startswith(package + ".")}


def get(kind: str, name: str) -> Entry:
    known = entries(kind)
    if name not in known:
        plural = {"analysis": "analyses"}.get(kind, kind + "s")
        close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"unknown {kind} {name!r}{hint}; known {plural}: "
                         f"{', '.join(known) or '(none)'}")
    return known[name]
