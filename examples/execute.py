"""Execute the notebooks in examples/ in place, on the smoke-scale runs of examples/smoke.toml.

    python -m study sweep study=examples/smoke.toml    # the runs (skipped where finished)
    python examples/execute.py                         # the notebooks, outputs written back

`make notebooks` runs both. Each notebook runs in a fresh kernel whose working directory is a
temporary `examples/` beside a `runs/` that holds links to the smoke runs only, so the
notebook's `study.find_run(...)` (the nearest `runs/` from the notebook's folder up) finds
those even where `make demo`'s larger runs sit in the repository's runs/: the committed
outputs are always the smoke runs'. The notebooks are stored with their outputs and without what changes at every execution (cell
timings, the kernel's version details).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SMOKE = HERE / "smoke.toml"
NOTEBOOKS = sorted(HERE.glob("*.ipynb"))
METADATA = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"}}


def smoke_runs() -> list[Path]:
    """The run directories `python -m study sweep study=examples/smoke.toml` writes, relative
    to the directory it runs in (the repository root, under `make notebooks`)."""
    from study.sweep.plan import parse

    plan, _ = parse([f"study={SMOKE}"])
    return [Path(r.path) for r in plan.runs]


def execute(book, runs, timeout: int = 600):
    """`book` (an nbformat notebook) executed in a fresh kernel that sees `runs` (run
    directories) as ../runs/<name>, and nothing else there; returns it, stripped
    (`strip`). Raises nbclient's CellExecutionError, naming the cell, when a cell fails."""
    import nbclient
    from jupyter_client.manager import KernelManager

    with tempfile.TemporaryDirectory(prefix="study-notebook-") as tmp:
        (Path(tmp) / "examples").mkdir()
        (Path(tmp) / "runs").mkdir()
        for run in runs:
            (Path(tmp) / "runs" / Path(run).name).symlink_to(Path(run).resolve(),
                                                             target_is_directory=True)
        # the kernel talks over local sockets in the temporary directory (ipykernel warns,
        # on every start, that TCP on localhost is unencrypted)
        km = KernelManager(kernel_name="python3", transport="ipc", ip=f"{tmp}/kernel")
        client = nbclient.NotebookClient(book, km=km, timeout=timeout, kernel_name="python3",
                                         record_timing=False,
                                         resources={"metadata": {"path": f"{tmp}/examples"}})
        try:
            client.execute()
        finally:  # a kernel the client did not start is ours to stop
            if km.has_kernel:
                km.shutdown_kernel(now=False)
    return strip(book)


def strip(book):
    """`book` without what differs between two executions of the same cells: the kernel's
    version details and per-cell execution metadata."""
    book.metadata = dict(METADATA)
    for cell in book.cells:
        cell.metadata.pop("execution", None)
    return book


def main() -> int:
    import nbformat

    os.chdir(ROOT)
    # the kernel imports this checkout's study, however the package was installed
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    runs = smoke_runs()
    missing = [str(r) for r in runs if not (r / "status.json").is_file()]
    if missing:
        print(f"error: {missing[0]} is not there yet: run `python -m study sweep "
              f"study=examples/smoke.toml` first", file=sys.stderr)
        return 2
    for path in NOTEBOOKS:
        book = nbformat.read(path, as_version=4)
        nbformat.write(execute(book, runs), path)
        print(f"executed {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
