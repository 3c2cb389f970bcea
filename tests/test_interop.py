"""docs/interop.md's recipes run as written: its Python code blocks, in order, as one script
on a trained rope2 and gru run, in a fresh interpreter that must print nothing (no start-up
notices, warnings or progress bars of nnsight, TransformerLens or transformers). The blocks
assert what they claim (site reads equal `run.cache`, exported logits equal ours, the
TransformerLens hooks equal our sites), so the page cannot drift from the code."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DOC = ROOT / "docs" / "interop.md"
# the run directories the page names, replaced by the session's trained runs
RUNS = {"rope2": "runs/counting-rope2-s0-1a2b3c4d", "gru": "runs/counting-gru-s0-1a2b3c4d"}
MISSING = [p for p in ("nnsight", "transformer_lens") if importlib.util.find_spec(p) is None]


def code_blocks(text: str) -> list[str]:
    """The ```python blocks of a markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_page_has_the_recipes_and_names_the_runs_it_uses():
    blocks = code_blocks(DOC.read_text(encoding="utf-8"))
    script = "\n".join(blocks)
    assert len(blocks) >= 5
    for needle in ("nnsight.NNsight(net)", ".sites.resid[1].output[0, 3] =",
                   "TransformerBridge.boot_transformers", "output_attentions=True",
                   "run.cache(prompts)"):
        assert needle in script, needle
    for path in RUNS.values():
        assert script.count(path) == 1, path


@pytest.mark.slow  # every recipe of the page in a fresh interpreter
@pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed: "
                    "pip install 'comparative-interp[interop]'")
def test_the_recipes_run_and_print_nothing(trained_runs, tmp_path):
    script = "\n".join(code_blocks(DOC.read_text(encoding="utf-8")))
    for model, path in RUNS.items():
        script = script.replace(repr(path)[1:-1], str(trained_runs(model)))
    (tmp_path / "recipes.py").write_text(script, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "recipes.py"], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout == "" and out.stderr == "", (out.stdout + out.stderr)[-4000:]
    assert (tmp_path / "exported" / "tokenizer.json").is_file()
