"""One run handle (`study.open_run`): it gives back the task and the weights training saved,
the network frozen in eval mode on the device asked for, and every command that opens an
existing run (`analyze`, `compare`, `report`) opens it through this handle, once, building its
task once and loading every network through it."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

import study
import study.run.handle as api
from study.cli import main
from study.core.errors import UsageError
from study.train.runtime import resolve_device


def _frozen_on(net, device) -> bool:
    return (not net.training and not any(p.requires_grad for p in net.parameters())
            and {p.device for p in net.parameters()} == {device})


def test_the_handle_gives_back_the_task_and_weights_training_saved(trained_runs):
    from safetensors.torch import load_file

    from study.train.checkpoint import WEIGHTS, load_task, read_meta, resolve_step

    run = study.open_run(trained_runs("gru"))
    saved = {}
    for checkpoint in (0, "final"):
        ckpt = resolve_step(run.path, checkpoint)
        saved[checkpoint] = load_file(str(ckpt / WEIGHTS))
        net = run.model(checkpoint, device="cpu")
        assert _frozen_on(net, torch.device("cpu"))
        state = net.state_dict()
        assert set(state) == set(saved[checkpoint])
        assert all(torch.equal(state[k], v) for k, v in saved[checkpoint].items())
        assert run.step(checkpoint) == read_meta(ckpt)["step"]
        # the task rebuilt from config.json is the one the checkpoint says training used
        assert run.task.fingerprint() == load_task(read_meta(ckpt)).fingerprint()
    assert run.step("final") == run.checkpoints[-1] > 0
    assert any(not torch.equal(saved[0][k], saved["final"][k]) for k in saved[0])  # trained


def test_a_checkpoint_whose_meta_lacks_a_key_is_one_line_naming_it(trained_runs, tmp_path):
    from study.train.checkpoint import META, resolve_step

    path = tmp_path / "run"
    shutil.copytree(trained_runs("gru"), path)
    meta = resolve_step(path, "final") / META
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items()
                                if k != "vocab_size"}))
    with pytest.raises(UsageError) as e:
        study.open_run(path).model()
    assert "vocab_size" in str(e.value) and str(meta) in str(e.value)
    assert "\n" not in str(e.value)


@pytest.fixture
def spy(monkeypatch, trained_runs):
    """Every run the handle opens, every task it builds and every network it loads (from
    here on: the shared runs are trained, and so opened, before)."""
    trained_runs("gru"), trained_runs("lstm")
    seen = {"opened": [], "tasks": [], "models": []}
    init, build, model = api.Run.__init__, api.build_task, api.Run.model

    def opened(self, path):
        init(self, path)
        seen["opened"].append(self.path.resolve())

    def built(cfg):
        seen["tasks"].append(build(cfg))
        return seen["tasks"][-1]

    def loaded(self, checkpoint="final", device="cpu"):
        net = model(self, checkpoint, device)
        seen["models"].append((self.path.resolve(), torch.device(device), net))
        return net

    monkeypatch.setattr(api.Run, "__init__", opened)
    monkeypatch.setattr(api, "build_task", built)
    monkeypatch.setattr(api.Run, "model", loaded)
    return seen


def _copy(trained_runs, model, tmp_path):
    """A copy of a shared trained run, for commands that write into it."""
    path = tmp_path / model
    shutil.copytree(trained_runs(model), path)
    return path.resolve()


def test_analyze_opens_its_run_through_the_handle_once(trained_runs, tmp_path, spy):
    path = _copy(trained_runs, "gru", tmp_path)
    assert main(["analyze", str(path), "analysis=probes", "checkpoint=all"]) == 0
    assert spy["opened"] == [path]
    assert len(spy["tasks"]) == 1  # once per command, whatever the number of checkpoints
    steps = {int(json.loads((p / "meta.json").read_text())["step"])
             for p in (path / "checkpoints").glob("step_*")}
    assert len(spy["models"]) >= len(steps)
    device = resolve_device()
    assert all(where == path and d == device and _frozen_on(net, device)
               for where, d, net in spy["models"])
    cli_task = spy["tasks"][0]
    assert cli_task.fingerprint() == study.open_run(path).task.fingerprint()  # the API's


def test_compare_opens_each_run_through_the_handle_once(trained_runs, tmp_path, spy):
    gru, lstm = _copy(trained_runs, "gru", tmp_path), _copy(trained_runs, "lstm", tmp_path)
    assert main(["compare", str(gru), str(lstm), f"out={tmp_path / 'out'}"]) == 0
    assert spy["opened"] == [gru, lstm]
    assert len(spy["tasks"]) == 2  # one per run
    assert {where for where, _, _ in spy["models"]} == {gru, lstm}
    device = resolve_device()
    assert all(d == device and _frozen_on(net, device) for _, d, net in spy["models"])


def test_report_opens_each_run_through_the_handle_and_loads_no_network(trained_runs, tmp_path,
                                                                        spy):
    gru, lstm = trained_runs("gru").resolve(), trained_runs("lstm").resolve()
    assert main(["report", str(gru), str(lstm), str(gru), f"out={tmp_path / 'out'}",
                 "markdown=false"]) == 0
    assert spy["opened"] == [gru, lstm]  # each once, however often it is named
    assert spy["tasks"] == [] and spy["models"] == []
    assert (tmp_path / "out" / "index.html").is_file()
