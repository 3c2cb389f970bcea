"""From Python (`study.open_run`): a run directory opened by hand, its trained alignment as a
`pyvene.IntervenableModel` that reproduces the recorded IIA, the same interchange by hand,
pyvene's own save format, the export to `transformers`, and one-line errors naming the file
or key."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import study
from study.core.errors import UsageError
from tests.conftest import ROOT


def _recorded(run, alignment, k, split="test"):
    das = run.table("das")
    row = das[(das["variable"] == "up_down:count") & (das["alignment"] == alignment)
              & (das["k"] == k) & (das["split"] == split)]
    assert len(row) == 1
    return row.iloc[0]


def test_opening_a_run_and_reading_its_tables_needs_no_torch(trained_runs):
    path = trained_runs("gru")
    code = ("import sys, study\n"
            f"run = study.open_run({str(path)!r})\n"
            "assert run.config.model == 'gru' and run.checkpoints[0] == 0\n"
            "m = run.metrics\n"
            "assert {'step', 'split', 'metric', 'value'} <= set(m.columns) and len(m)\n"
            "assert 'das' in run.tables() and len(run.table('das'))\n"
            "assert run.summary['test_accuracy'] == 1.0\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("model", ["gru", "lstm"])
def test_the_trained_alignment_through_pyvene_reproduces_the_recorded_iia(trained_runs, model):
    from study.analyses.das.export import chosen_k
    from study.models.sites.pyvene_loader import pyvene

    run = study.open_run(trained_runs(model))
    pairs = run.pairs("up_down:count")
    assert len(pairs) == run.das_config.n_test
    for alignment in ("oaf", "laf", "random"):
        for k in (1, 2):
            iv = run.intervenable("up_down:count", alignment=alignment, k=k)
            assert isinstance(iv, pyvene().IntervenableModel)
            row = _recorded(run, alignment, k)
            assert abs(study.iia(iv, pairs) - row["iia"]) <= 1e-6, (alignment, k)
            assert abs(study.iia(iv, pairs, all_pairs=True) - row["iia_all"]) <= 1e-6
    oaf = {k: _recorded(run, "oaf", k)["iia"] for k in (1, 2)}
    assert 0.3 < max(oaf.values()) < 1.0  # a trained alignment, not a trivial score
    assert _recorded(run, "random", 2)["iia"] < 0.3
    # k=None: the smallest within 0.01 of the best on the training split, never on test
    on_train = {k: _recorded(run, "oaf", k, "train")["iia"] for k in (1, 2)}
    iv = run.intervenable("up_down:count")
    assert list(iv.interventions.values())[0].k == chosen_k(on_train)


def test_by_hand_interchanges_give_the_handles_and_the_networks_own_logits(trained_runs):
    """`study.site_intervenable` and `study.interchange`, the by-hand path of the notebooks:
    the trained alignment put at its site by hand gives what `run.intervenable` gives, and a
    patch writing each base's own vectors gives the network's own logits."""
    run = study.open_run(trained_runs("gru"))
    pairs, net = run.pairs("up_down:count"), run.model()
    oaf, kind, _, _ = run.alignment("up_down:count", k=2)
    mine = study.interchange(study.site_intervenable(net, kind, oaf), pairs)  # (n, seq, vocab)
    theirs = study.interchange(run.intervenable("up_down:count", k=2), pairs)
    torch.testing.assert_close(mine, theirs)
    own = study.site_vectors(net, pairs, kind, of="base")  # (n, width)
    with torch.no_grad():
        patched = study.interchange(study.site_intervenable(net, kind), pairs, sources=own)
        torch.testing.assert_close(patched, net(torch.as_tensor(pairs.base_ids)))


def test_a_pyvene_user_loads_the_saved_alignment_with_pyvene_and_the_network(trained_runs):
    path = trained_runs("gru")
    run = study.open_run(path)
    index = json.loads((path / "analyses" / "das" / "pyvene" / "index.json").read_text())
    assert {e["alignment"] for e in index} == {"oaf", "laf"}
    from study.models.sites.pyvene_loader import pyvene

    pv = pyvene()
    for entry in index:
        directory = path / "analyses" / "das" / "pyvene" / entry["directory"]
        iv = pv.IntervenableModel.load(str(directory), study.pyvene_view(run.model()))
        got = study.iia(iv, run.pairs(entry["variable"]))
        assert abs(got - _recorded(run, entry["alignment"], entry["k"])["iia"]) <= 1e-6
        assert abs(got - entry["test_iia"]) <= 1e-6


def test_errors_are_one_line_naming_the_file_or_key(trained_runs, tmp_path):
    run = study.open_run(trained_runs("gru"))
    cases = [
        (lambda: study.open_run(tmp_path / "nowhere"), "does not exist"),
        (lambda: run.table("probes"), "tables: das"),
        (lambda: run.pairs("nope"), "choose from up_down:count"),
        (lambda: run.pairs("up_down:count", split="nope"), "split='nope'"),
        (lambda: run.intervenable("up_down:phase"), "variables: up_down:count"),
        (lambda: run.intervenable("up_down:count", k=4), "trained at k = 1, 2"),
        (lambda: run.intervenable("up_down:count", alignment="pca"), "choose from oaf"),
        (lambda: run.intervenable("up_down:count", checkpoint=0), "not run at checkpoint 0"),
        (lambda: run.intervenable("up_down:count", checkpoint=3), "checkpoint=3 is not"),
        (lambda: run.intervenable("up_down:count", site="resid[1]"), "aligned at state@pair"),
        (lambda: run.to_transformers(), "no GPT-NeoX equivalent"),
    ]
    for call, needle in cases:
        with pytest.raises(UsageError) as e:
            call()
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    damaged = tmp_path / "damaged"
    shutil.copytree(run.path, damaged)
    f = damaged / "analyses" / "das" / "alignments.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(UsageError, match="alignments.safetensors"):
        study.open_run(damaged).intervenable("up_down:count")


def test_a_trained_transformer_exports_to_transformers_with_equal_logits_offline(
        trained_runs, tmp_path, monkeypatch):
    from transformers import GPTNeoXForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = study.open_run(trained_runs("rope2"))
    assert run.checkpoints[-1] == 200
    ours, hf = run.model(), run.to_transformers()
    ids = torch.as_tensor(run.task.split("test").ids[:8]).long()
    with torch.no_grad():
        want = ours(ids)
        torch.testing.assert_close(hf(input_ids=ids).logits, want, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(want, run.model(checkpoint=0)(ids), atol=1e-3)  # trained
        hf.save_pretrained(tmp_path / "hf")
        again = GPTNeoXForCausalLM.from_pretrained(tmp_path / "hf").eval()
        torch.testing.assert_close(again(input_ids=ids).logits, want, atol=1e-5, rtol=1e-5)


def test_open_runs_opens_each_directory_once(trained_runs):
    gru, lstm = trained_runs("gru"), trained_runs("lstm")
    runs = study.open_runs([gru, lstm, gru / ".." / gru.name])
    assert [r.config.model for r in runs] == ["gru", "lstm"]
    with pytest.raises(UsageError, match="at least one"):
        study.open_runs([])
