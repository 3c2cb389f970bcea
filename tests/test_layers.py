"""The packages form layers and every import points down.

kernel (`study.core`) <- tasks, models <- training (`study.train`) and analyses <- reports
<- the application (the rest of `study`). Imports inside functions count too: a lazy import
that runs back up is still a dependency that runs back up.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "study"
# the layers inside the one top-level package, the most specific first
LAYERS = ("study.core", "study.train", "study.tasks", "study.models", "study.analyses",
          "study.reports")

# layer -> the layers it may import (itself included)
ALLOWED = {
    "study.core": {"study.core"},
    "study.tasks": {"study.core", "study.tasks"},
    "study.models": {"study.core", "study.models"},
    "study.train": {"study.core", "study.train"},
    "study.analyses": {"study.core", "study.tasks", "study.models", "study.analyses"},
    "study.reports": {"study.core", "study.reports"},
    "study.app": {"study.core", "study.train", "study.app", "study.tasks", "study.models",
                  "study.analyses", "study.reports"},
}


def layer_of(module: str) -> str | None:
    if module.split(".")[0] != PROJECT:
        return None
    for sub in LAYERS:
        if module == sub or module.startswith(sub + "."):
            return sub
    return "study.app"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str):
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            if name in ("study",):  # `from study import x`: x is the submodule imported
                for a in node.names:
                    yield node.lineno, f"study.{a.name}"
            else:
                yield node.lineno, name


def sources():
    yield from sorted((ROOT / PROJECT).rglob("*.py"))


@pytest.mark.parametrize("path", list(sources()), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    module = module_name(path)
    here = layer_of(module)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {name}"
           for line, name in imports_of(path, module)
           if layer_of(name) is not None and layer_of(name) not in ALLOWED[here]]
    assert not bad, "imports that run back up:\n" + "\n".join(bad)


def test_no_benchmark_code_in_product_packages():
    for top in ("analyses", "reports", "tasks", "models"):
        for path in (ROOT / "study" / top).rglob("*.py"):
            assert "bench" not in path.name, path
