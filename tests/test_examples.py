"""The notebooks in examples/ run end to end on trained smoke-scale runs, and are stored
without outputs. Each runs in a fresh kernel whose working directory and temporary files are
under the test's tmp_path."""
from __future__ import annotations

import nbclient  # the `test` extra (pyproject.toml) installs nbclient, nbformat, ipykernel
import nbformat
import pytest

from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))


def test_the_examples_are_the_four_notebooks_the_readme_names():
    names = [p.name for p in NOTEBOOKS]
    assert names == ["01_open_a_run.ipynb", "02_das_through_pyvene.ipynb",
                     "03_patch_one_site.ipynb", "04_compare_subspaces.ipynb"]
    readme = (ROOT / "README.md").read_text()
    assert all(f"examples/{n}" in readme for n in names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    nbformat.validate(book)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, trained_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDY_RUN_GRU", str(trained_runs("gru")))
    monkeypatch.setenv("STUDY_RUN_LSTM", str(trained_runs("lstm")))
    monkeypatch.setenv("STUDY_EXAMPLE_STEPS", "20")  # smoke scale: a few alignment updates
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(book, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
