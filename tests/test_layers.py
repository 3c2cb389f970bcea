"""The packages form layers and every import points down.

kernel (`study.core`) <- tasks, models <- training (`study.train`) and analyses <- claims
(`study.claims`, torch-free: tables from tables) <- reports <- one run (`study.run`) <- many runs (`study.sweep`) <- the checks (`study.checks`) <- the
command line (`study/cli.py`, `study/commands.py`, `study/__init__.py`). Inside `study.run`
the run's settings and state lie below the run handle, which lies below the work done on a
run. The command modules never import each other. Imports inside functions count too: a lazy
import that runs back up is still a dependency that runs back up.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "study"
# the layers inside the one top-level package, the most specific first
LAYERS = ("study.core", "study.train", "study.tasks", "study.models", "study.analyses",
          "study.claims", "study.reports", "study.run", "study.sweep", "study.checks")
LIBRARY = {"study.core", "study.train", "study.tasks", "study.models", "study.analyses",
           "study.claims", "study.reports"}

# layer -> the layers it may import (itself included); "study.cli" is the command line: the
# modules directly in study/
ALLOWED = {
    "study.core": {"study.core"},
    "study.tasks": {"study.core", "study.tasks"},
    "study.models": {"study.core", "study.models"},
    "study.train": {"study.core", "study.train"},
    "study.analyses": {"study.core", "study.tasks", "study.models", "study.analyses"},
    "study.claims": {"study.core", "study.claims"},
    "study.reports": {"study.core", "study.claims", "study.reports"},
    "study.run": LIBRARY | {"study.run"},
    "study.sweep": LIBRARY | {"study.run", "study.sweep"},
    "study.checks": LIBRARY | {"study.run", "study.sweep", "study.checks"},
    "study.cli": LIBRARY | {"study.run", "study.sweep", "study.checks", "study.cli"},
}

# inside study.run, lowest first: a module imports its own tier or those below
RUN_TIERS = (
    # what a run is: its settings, the checks before it, what it is built from, its state
    {"config", "runtime_keys", "preflight", "estimate", "analysis_time", "flops", "env", "build",
     "runstate"},
    # the run handle (`study.open_run`) and what goes through it
    {"handle", "runs", "intervene"},
    # the work done on runs: training, analysing, comparing
    {"runner", "analyze", "compare"},
)


def layer_of(module: str) -> str | None:
    if module.split(".")[0] != PROJECT:
        return None
    for sub in LAYERS:
        if module == sub or module.startswith(sub + "."):
            return sub
    return "study.cli"


def run_tier(module: str) -> int | None:
    if not module.startswith("study.run."):
        return None
    name = module.split(".")[2]
    return next(i for i, tier in enumerate(RUN_TIERS) if name in tier)


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


def test_every_module_of_the_run_package_has_a_tier():
    names = {p.stem for p in (ROOT / "study" / "run").glob("*.py")} - {"__init__"}
    assert names == set().union(*RUN_TIERS)


def test_inside_the_run_package_imports_point_down():
    """The run's settings never import the handle; the handle never imports the runner
    (`from study.run import handle` counts as importing study.run.handle)."""
    graph = _import_graph()
    bad = [f"{m} imports {other}" for m in graph if run_tier(m) is not None
           for other in graph[m] if (run_tier(other) or 0) > run_tier(m)]
    assert not bad, "imports that run back up inside study.run:\n" + "\n".join(bad)


def test_no_command_imports_another():
    """Each command's module (`study/cli.py`'s COMMANDS) imports no other command's module:
    what two commands share lives below them."""
    from study.cli import COMMANDS
    import inspect
    modules = {inspect.getclosurevars(h).nonlocals["module"] for h in COMMANDS.values()}
    graph = _import_graph()
    bad = [f"{m} imports {other}" for m in modules for other in graph[m] & modules]
    assert not bad, "\n".join(bad)


def test_no_benchmark_code_in_product_packages():
    for top in ("analyses", "reports", "tasks", "models"):
        for path in (ROOT / "study" / top).rglob("*.py"):
            assert "bench" not in path.name, path


def _import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in the file, lazy imports too);
    `from a.b import c` counts as importing `a.b.c` when that is a module, else `a.b`."""
    paths = {module_name(p): p for p in sources()}

    def resolve(name):
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{up}.{node.module}" if node.module else up
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for name in names:
                target = resolve(name)
                # a module's own package is initialised before it: not an edge of a cycle
                if target and target != module and not module.startswith(target + "."):
                    found.add(target)
        graph[module] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop(); on_stack.discard(w); component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_the_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_two_modules_import_each_other_even_lazily():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles (a lazy import inside a function counts):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


# outside the reports, what may import them: the application's calls that write a report
REPORT_WRITERS = {"study.reports.write"}


def test_only_the_report_writers_are_imported_from_outside_the_reports():
    """No section, loader or helper of `study.reports` is read by the application, the
    result tables or the run handle: they read `study.claims`, and the reports only draw."""
    graph = _import_graph()
    bad = [f"{m} imports {other}" for m in graph if not m.startswith("study.reports")
           for other in graph[m]
           if other.startswith("study.reports") and other not in REPORT_WRITERS
           and other != "study.reports"]
    assert not bad, "\n".join(sorted(bad))


def test_the_claims_import_no_torch():
    """The claims are made from tables on any machine, torch or not."""
    for path in (ROOT / "study" / "claims").rglob("*.py"):
        names = [n for _, n in imports_of(path, module_name(path))]
        assert not [n for n in names if n.split(".")[0] == "torch"], path
