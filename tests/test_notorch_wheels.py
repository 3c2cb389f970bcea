"""The wheels a GPU node with its own torch needs (`make wheelhouse-notorch`,
`tools/notorch_requirements.py`): every dependency the gpu-check imports, none of torch's
stack; and, marked slow, a node's Python with torch installing them with no index and
running the check at smoke scale."""
from __future__ import annotations

import os
import subprocess
import sys
import venv

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import notorch_requirements as nr  # noqa: E402


def test_the_list_holds_every_dependency_but_torch_and_its_stack():
    names = set(nr.closure(nr.ROOT_DIST, nr.EXTRAS))
    for needed in ("pyvene", "altair", "jsonschema", "jsonschema-specifications", "referencing",
                   "rpds-py", "submitit", "vl-convert-python", "pandas", "pyarrow", "pytest",
                   "safetensors", "scikit-learn", "transformers"):
        assert needed in names, needed
    assert not [n for n in names if nr.TORCH_STACK.match(n)]
    assert "setuptools" in names  # torch requires it, and a fresh venv has none


@pytest.mark.slow  # builds a venv and installs a hundred wheels: minutes
def test_a_node_python_with_torch_installs_the_rest_from_wheels_and_runs_the_check(tmp_path):
    """A stand-in for the node: a venv that sees this environment's torch through a .pth file
    and nothing else of ours; the no-torch wheels (collected from pip's cache or the index)
    installed with --no-index; the quick check then runs with that venv's Python."""
    wheels = tmp_path / "wheels"
    pinned = tmp_path / "pinned.txt"
    pinned.write_text(subprocess.run([sys.executable, str(ROOT / "tools/notorch_requirements.py"),
                                      "--pinned"], capture_output=True, text=True,
                                     check=True).stdout)
    got = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                          str(wheels), "-r", str(pinned)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"the wheels could not be collected here: {got.stderr[-300:]}")
    node = tmp_path / "node"
    venv.create(node, with_pip=True)
    from importlib import metadata
    site = next((node / "lib").glob("python*/site-packages"))
    # only torch's compiled stack from this environment (every top-level entry its
    # distributions installed: torch, functorch, torchgen, triton, nvidia, their dist-info),
    # as a node's module provides it
    own = tmp_path / "node-torch"
    own.mkdir()
    for dist in metadata.distributions():
        if not nr.TORCH_STACK.match(nr._norm(dist.metadata["Name"])):
            continue
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            src = dist.locate_file(top)
            if src.exists() and not (own / top).exists():
                os.symlink(src, own / top)
    (site / "node_torch.pth").write_text(str(own) + "\n")
    py = node / "bin" / "python"
    names = tmp_path / "requirements.txt"
    names.write_text("\n".join(l.split("==")[0] for l in pinned.read_text().split()) + "\n")
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                           str(wheels), "-r", str(names)], capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-2000:]
    out = tmp_path / "out"
    r = subprocess.run(["make", "-s", "gpu-check", f"PYTHON={py}", f"OUT={out}",
                        "GPU_CHECK=device=cpu quick=true only=doctor,grid"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (out / "summary.md").read_text().startswith("# gpu-check: all 2 items passed")
