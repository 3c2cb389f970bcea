"""Our calls into pyvene and transformers print nothing: the documented ways of loading a
saved alignment and of exporting a transformer leave stdout and stderr empty (each run in a
fresh interpreter, where pyvene's import notice and first log warning would appear), and
the user's own logging and progress-bar settings are the same after our calls as before."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest
import torch

from study.core.sites import site_key
from tests.conftest import ROOT, frozen_smoke_model


def _run_fresh(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess that trains and exports
def test_loading_a_das_export_through_our_helper_prints_nothing(tmp_path):
    from study.analyses.das.alignment import OrthogonalAlignment
    from study.analyses.das.export import export

    _, model, _ = frozen_smoke_model("counting", "gru")
    torch.manual_seed(0)
    inst = OrthogonalAlignment(model.d_state, k=2)
    rows = [dict(split=split, alignment="oaf", variable="up_down:count", site="state",
                 layer=0, position=-1, k=2, iia=0.5) for split in ("train", "test")]
    export(model, rows, {("oaf", "up_down:count", site_key("state", 0, -1), 2): inst},
           tmp_path, checkpoint=7)
    (entry,) = json.loads((tmp_path / "pyvene" / "index.json").read_text())
    directory = tmp_path / "pyvene" / entry["directory"]
    # the documented route: the network, our loader, an IIA through the loaded model;
    # then pyvene's own load and save under our helpers again (a second load, and a save
    # into a directory that exists, are where pyvene prints and logs)
    got = _run_fresh("""
        import sys
        import study
        from study.models.sites.pyvene_bridge import load_intervenable, save_intervenable
        from tests.conftest import frozen_smoke_model
        task, net, _ = frozen_smoke_model("counting", "gru")
        iv = load_intervenable(sys.argv[1], net)
        value = study.iia(iv, task.counterfactuals("up_down:count", 16, split="test", seed=0))
        assert 0 <= value <= 1 or value != value, value
        save_intervenable(iv, sys.argv[1])
        load_intervenable(sys.argv[1], net)
        """, directory)
    assert got.returncode == 0, got.stderr
    assert (got.stdout, got.stderr) == ("", "")


@pytest.mark.slow  # a subprocess that exports to transformers
def test_exporting_a_transformer_and_saving_it_prints_nothing(tmp_path):
    got = _run_fresh("""
        import sys
        import torch
        from study.models.nets.gpt_neox import to_gpt_neox
        from tests.conftest import frozen_smoke_model
        _, net, _ = frozen_smoke_model("counting", "gpt12")
        hf = to_gpt_neox(net)
        ids = torch.zeros(2, 5, dtype=torch.long)
        out = hf(ids, output_attentions=True)  # what attention-reading tools ask for
        assert len(out.attentions) == net.config.n_layers
        hf.save_pretrained(sys.argv[1])
        """, tmp_path / "hf")
    assert got.returncode == 0, got.stderr
    assert (got.stdout, got.stderr) == ("", "")
    assert (tmp_path / "hf" / "config.json").is_file()


def test_quiet_drops_pyvenes_warnings_in_our_calls_only_and_restores_logging(caplog):
    import transformers.utils.logging as tf_logging

    from study.models.quiet import quiet
    from study.models.sites.pyvene_bridge import register
    from study.models.sites.pyvene_loader import pyvene

    pv = pyvene()
    _, model, _ = frozen_smoke_model("counting", "gru")

    def build():  # pyvene logs a warning on the root logger for use_fast=True
        rep = pv.RepresentationConfig(layer=0, component="state", unit="pos",
                                      intervention=pv.VanillaIntervention(embed_dim=4))
        pv.IntervenableModel(pv.IntervenableConfig(representations=[rep]), register(model),
                             use_fast=True)

    root, tf = logging.getLogger(), logging.getLogger("transformers")
    before = (list(root.handlers), list(root.filters), tf.level,
              tf_logging.is_progress_bar_enabled())
    with caplog.at_level(logging.WARNING):
        with quiet():
            assert not tf_logging.is_progress_bar_enabled()
            build()
        assert caplog.records == []
        build()  # the user's own call: pyvene's warning reaches the user's logging
        logging.getLogger("mine").warning("the user's warning")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "use_fast=True" in messages[0]
    assert messages[1] == "the user's warning"
    assert (list(root.handlers), list(root.filters), tf.level,
            tf_logging.is_progress_bar_enabled()) == before
