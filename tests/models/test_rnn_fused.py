"""The recurrent networks' fused kernel where no site is hooked: it equals the step loop,
free-running included, and reads its weights as one block."""
from __future__ import annotations

import pytest
import torch

from study.models.nets.rnn import RecurrentLM
from tests.models.rnn_nets import CELLS, SEQ, smoke_net, token_ids


def _step_loop(model):
    """A global no-op module hook (watches every module call): the network must then run its
    step loop. Returns the handle."""
    from torch.nn.modules.module import register_module_forward_hook

    return register_module_forward_hook(lambda _m, _a, y: None)


def _grads(model, logits):
    model.zero_grad()
    (logits ** 2).mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("cell", CELLS)
def test_with_no_site_hooked_the_fused_kernel_runs_and_equals_the_step_loop(cell, monkeypatch):
    model = smoke_net(cell, seed=5)
    ids = token_ids(5, 4)
    handle = _step_loop(model)
    want = model(ids)
    want_grads = _grads(model, want)
    handle.remove()

    def no_loop(*_a, **_k):
        raise AssertionError("the step loop ran with no site hooked")

    monkeypatch.setattr(model, "_step", no_loop)
    got = model(ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    got_grads = _grads(model, got)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_free_running_by_fused_fixed_point_passes_equals_the_step_loop(cell, monkeypatch):
    import study.models.nets.rnn as rnn

    monkeypatch.setattr(rnn, "SETTLE_PASSES", SEQ)  # a random network needs many passes
    monkeypatch.setattr(rnn, "FUSED_FREE_DEVICES", ("cpu", "cuda"))  # the GPU path, here
    model = smoke_net(cell, seed=3)
    ids = token_ids(6, 11)
    feed = torch.zeros_like(ids, dtype=torch.bool)
    feed[:, 4:8] = True
    handle = _step_loop(model)
    want = model(ids, feed=feed)
    want_grads = _grads(model, want)
    handle.remove()
    assert model._free_fused(ids, feed, None) is not None  # settled: the fused path is taken
    got = model(ids, feed=feed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for name, g in _grads(model, got).items():
        torch.testing.assert_close(g, want_grads[name], rtol=1e-4, atol=1e-6)
    # a batch that does not settle within the passes falls back to the loop, same result
    monkeypatch.setattr(rnn, "SETTLE_PASSES", 1)
    assert model._free_fused(ids, feed, None) is None
    torch.testing.assert_close(model(ids, feed=feed), want, rtol=1e-5, atol=1e-6)


def test_a_hooked_state_site_sees_every_step():
    model = smoke_net("gru")
    calls = []
    handle = model.sites.state[3].register_forward_hook(lambda _m, _a, y: calls.append(1))
    model(token_ids(2, 0))
    handle.remove()
    assert len(calls) == 1 and not model.sites.hooked("state")


def _as_one_block(model: RecurrentLM) -> None:
    """Make the cell's weights views of one block, as cuDNN's flattening leaves them on CUDA."""
    cell = model.cell
    weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
    block = torch.cat([w.detach().flatten() for w in weights])
    offset = 0
    with torch.no_grad():
        for w in weights:
            w.set_(block.untyped_storage(), offset, w.shape)
            offset += w.numel()


@pytest.mark.parametrize("cell", CELLS)
def test_a_checkpoint_of_weights_in_one_block_is_written_and_read_back(cell, tmp_path):
    from study.train import checkpoint as ckpt

    model = smoke_net(cell, seed=3)
    _as_one_block(model)
    ids = token_ids(4, 1)
    want = model(ids)
    path = ckpt.save(tmp_path, 7, model, {"what": "test"}, None)
    other = smoke_net(cell, seed=4)
    _as_one_block(other)
    block = other.cell.weight_ih.untyped_storage().data_ptr()
    ckpt.load_weights(other, path)
    torch.testing.assert_close(other(ids), want, rtol=0, atol=0)
    # read in place: the weights are still views of their one block
    assert other.cell.bias_hh.untyped_storage().data_ptr() == block


@pytest.mark.gpu
@pytest.mark.parametrize("cell", CELLS)
def test_on_cuda_the_fused_kernel_reads_its_weights_without_a_copy_or_a_warning(cell):
    import warnings

    model = smoke_net(cell).cuda()
    cell_ = model.cell
    blocks = {w.untyped_storage().data_ptr()
              for w in (cell_.weight_ih, cell_.weight_hh, cell_.bias_ih, cell_.bias_hh)}
    assert len(blocks) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "not part of single contiguous chunk of memory"
        model(token_ids(3, 0).cuda())
