"""Interventions on a recurrent network's state run in torch's fused GRU/LSTM kernel: cut at
the hooked steps (segmented), or around each row's own step when the caller declares per-row
steps (gathered, `Sites.per_row`, as `site_intervenable` does). Either way the logits and the
gradients are the step loop's, within float rounding, and the loop still runs where only it
can serve (a global module hook)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from study.analyses.das.alignment import LinearAlignment, OrthogonalAlignment
from study.models.sites import pyvene_bridge as ps
from study.models.sites import pyvene_run as pr
from tests.conftest import frozen_smoke_model
from tests.models.hook_reference import intervene

T = 12  # the counting smoke network's sequence length: its state sites


def _net(cell):
    _, model, _ = frozen_smoke_model("counting", cell)
    return model


def _ids(batch, seed):
    return torch.randint(0, 9, (batch, T), generator=torch.Generator().manual_seed(seed))


class Calls:
    """Counts one network's fused-kernel calls and step-loop steps."""

    def __init__(self, model, monkeypatch):
        self.kernel = self.step = 0
        kernel, step = model._kernel, model._step

        def count_kernel(*a, **k):
            self.kernel += 1
            return kernel(*a, **k)

        def count_step(*a, **k):
            self.step += 1
            return step(*a, **k)

        monkeypatch.setattr(model, "_kernel", count_kernel)
        monkeypatch.setattr(model, "_step", count_step)


def _loop(model, monkeypatch):
    """From here on the network runs its step loop whatever is hooked, and a per-row call
    hands each step's hook its own rows (no merged declaration): the reference."""
    monkeypatch.setattr(model, "_plan", lambda batch, pos_len: ("loop", None))
    monkeypatch.setattr(pr, "_one_intervention", lambda iv: False)


def _counted(inst):
    """Count an intervention's forward calls; returns the list that grows by one per call."""
    calls, forward = [], inst.forward

    def wrapped(*a, **k):
        calls.append(1)
        return forward(*a, **k)

    inst.forward = wrapped
    return calls


def _alignment(cls, width, k=3, seed=0):
    torch.manual_seed(seed)
    inst = cls(width, k)
    inst.fit_standardisation(3 * torch.randn(64, width) + 1)
    return inst


def _grads(params):
    return [p.grad.clone() for p in params]


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_plain_hooks_at_several_steps_cut_the_kernel_there_and_equal_the_loop(cell, monkeypatch):
    model = _net(cell)
    ids, pos = _ids(6, 1), torch.tensor([0, 3, 3, 7, T - 1, 5])  # 5 steps, one shared, 0 and T-1
    shift = torch.zeros(6, model.d_state, requires_grad=True)

    def run():
        shift.grad = None
        with intervene(model, "state", 0, pos, lambda r, v: 0.5 * v + 1 + shift[r]):
            out = model(ids)
        out.square().sum().backward()
        return out.detach(), shift.grad.clone()

    calls = Calls(model, monkeypatch)
    got, got_grad = run()
    assert (calls.kernel, calls.step) == (5, 0)  # [0] [1-3] [4-5] [6-7] [8-11]: none after 11
    with monkeypatch.context() as m:
        _loop(model, m)
        want, want_grad = run()
    assert calls.step == T
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_one_step_pyvene_intervenable_runs_the_kernel_not_the_loop(cell, monkeypatch):
    model, t = _net(cell), 4
    base, source = _ids(5, 2), _ids(5, 3)
    iv = ps.module_intervenable(model, "state", t, "rotated")
    calls = Calls(model, monkeypatch)
    with torch.no_grad():
        got = pr.interchange_ids(iv, base, source, source_pos=[1, 2, 4, 6, 9])
    assert calls.step == 0 and calls.kernel >= 2  # the source read, the base's two segments
    _loop(model, monkeypatch)
    with torch.no_grad():
        want = pr.interchange_ids(iv, base, source, source_pos=[1, 2, 4, 6, 9])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("cls", [OrthogonalAlignment, LinearAlignment])
@pytest.mark.parametrize("bpos, kernel_calls", [
    ([2, 5, 5, 9, 0, 11], 2),    # gathered: the prefix and the rest
    ([11] * 6, 1),               # every row at the last step: nothing after it
    ([3, 3, 8, 8, 3, 8], 2),     # 2 steps: gathered too (one alignment call for every row)
])
def test_per_row_steps_take_the_fused_path_and_equal_the_loop(cell, cls, bpos, kernel_calls,
                                                              monkeypatch):
    model = _net(cell)
    base, bpos = _ids(6, 4), torch.tensor(bpos)
    src = torch.randn(6, model.d_state, generator=torch.Generator().manual_seed(5))
    inst = _alignment(cls, model.d_state)
    iv = ps.site_intervenable(model, "state", 0, inst)
    params = [p for p in inst.parameters() if p.requires_grad]

    def run():
        for p in params:
            p.grad = None
        out = pr.interchange_vectors(iv, base, bpos, src)
        out.square().sum().backward()
        return out.detach(), _grads(params)

    calls, hits = Calls(model, monkeypatch), _counted(inst)
    got, got_grads = run()
    assert calls.step == 0 and calls.kernel == kernel_calls
    assert len(hits) == 1  # one call of the alignment acts for every row at its own step
    with monkeypatch.context() as m:
        _loop(model, m)
        hits.clear()
        want, want_grads = run()
    assert len(hits) == T  # the loop calls every step's hook
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # one tolerance for the whole gradient, relative to its largest entry: LAF's `signs` get
    # the small remainder of large cancelling terms (|grad core| ~ 1e2, |grad signs| ~ 1e-3)
    g, w = torch.cat([x.flatten() for x in got_grads]), torch.cat([x.flatten() for x in want_grads])
    torch.testing.assert_close(g, w, rtol=0, atol=1e-5 * float(w.abs().max()))


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_given_each_rows_clean_state_a_per_row_call_starts_every_row_at_its_step(cell,
                                                                                monkeypatch):
    """With the rows' clean states at their steps read beforehand (`clean_states`, as DAS
    reads its bases' once), the intervened forward runs nothing before a row's step: one
    kernel call (the rest) instead of two, the logits and gradients of every position at or
    after each row's step bit for bit those of the forward that computes the clean prefix
    itself, and NaN before them (never computed: a readout there shows)."""
    model = _net(cell)
    base, bpos = _ids(6, 4), torch.tensor([2, 5, 5, 9, 0, 11])
    src = torch.randn(6, model.d_state, generator=torch.Generator().manual_seed(5))
    inst = _alignment(OrthogonalAlignment, model.d_state)
    iv = ps.site_intervenable(model, "state", 0, inst)
    params = [p for p in inst.parameters() if p.requires_grad]
    from_step = torch.arange(T)[None, :] >= bpos[:, None]  # (6, T)

    def run(states, readout=from_step):
        for p in params:
            p.grad = None
        out = pr.interchange_vectors(iv, base, bpos, src, readout=readout, base_states=states)
        out.square().sum().backward()
        return out.detach(), _grads(params)

    want, want_grads = run(None)
    states = model.clean_states(base, bpos)  # (6, d_state)
    calls = Calls(model, monkeypatch)
    got, got_grads = run(states)
    assert calls.kernel == 1 and calls.step == 0
    assert torch.equal(got, want)
    assert all(torch.equal(g, w) for g, w in zip(got_grads, want_grads))
    with torch.no_grad():
        every = pr.interchange_vectors(iv, base, bpos, src, readout=torch.ones(6, T, dtype=bool),
                                       base_states=states).view(6, T, -1)
    assert every[~from_step].isnan().all() and every[from_step].isfinite().all()
    with torch.no_grad():  # without a readout the states are not used: every output computed
        assert pr.interchange_vectors(iv, base, bpos, src, base_states=states).isfinite().all()


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_packed_kernel_reads_nn_rnns_padded_outputs_by_one_gather(cell):
    """`_kernel` with lengths reads each row's outputs at its chosen steps straight from the
    packed outputs: torch's own nn.GRU / nn.LSTM on the PackedSequence, padded by
    pad_packed_sequence and read at those steps, with the same weights."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    model = _net(cell)
    H, g = model.d_hidden, torch.Generator().manual_seed(7)
    lengths = torch.tensor([3, 12, 1, 7, 7])
    x = torch.randn(5, T, model.cell.input_size, generator=g, requires_grad=True)
    h0 = torch.randn(1, 5, H, generator=g)
    c0 = torch.randn(1, 5, H, generator=g) if cell == "lstm" else None
    read = torch.arange(T)[None, :].expand(5, T).minimum(lengths[:, None] - 1)  # (5, T)
    w = torch.randn(5, T, H, generator=g)
    y, hn, cn = model._kernel(x, h0, c0, lengths=lengths, read=read)
    (gx,) = torch.autograd.grad((y * w).sum(), x)
    rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(model.cell.input_size, H, batch_first=True)
    rnn.load_state_dict({f"{k}_l0": v for k, v in model.cell.state_dict().items()})
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h_ref = rnn(packed, (h0, c0) if cell == "lstm" else h0)
    padded = pad_packed_sequence(out, batch_first=True, total_length=T)[0]  # (5, T, H)
    want = padded.gather(1, read[..., None].expand(-1, -1, H))
    (gx_ref,) = torch.autograd.grad((want * w).sum(), x)
    assert torch.equal(y, want)
    assert torch.equal(hn, h_ref[0] if cell == "lstm" else h_ref)
    if cell == "lstm":
        assert torch.equal(cn, h_ref[1])
    torch.testing.assert_close(gx, gx_ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_merged_per_row_call_in_the_step_loop_equals_the_per_step_reference(cell, monkeypatch):
    """When the network must run its loop (here a global module hook watches every call), the
    one acting site is applied at each row's own step: the per-step masks' result."""
    from torch.nn.modules.module import register_module_forward_hook

    model = _net(cell)
    base, bpos = _ids(6, 4), torch.tensor([2, 5, 5, 9, 0, 11])
    src = torch.randn(6, model.d_state, generator=torch.Generator().manual_seed(5))
    iv = ps.site_intervenable(model, "state", 0, _alignment(OrthogonalAlignment, model.d_state))
    calls = Calls(model, monkeypatch)
    handle = register_module_forward_hook(lambda m, a, y: None)
    try:
        with torch.no_grad():
            got = pr.interchange_vectors(iv, base, bpos, src)
    finally:
        handle.remove()
    assert calls.step == 2 * T and calls.kernel == 0  # the loop: own-step states, then the run
    _loop(model, monkeypatch)
    with torch.no_grad():
        want = pr.interchange_vectors(iv, base, bpos, src)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_lstm_head_reads_h_and_the_next_step_reads_h_and_c(monkeypatch):
    model, t = _net("lstm"), 4
    H, ids = model.d_hidden, _ids(3, 6)
    bump = lambda r, v: torch.cat([v[:, :H], v[:, H:] + 1.0], 1)  # noqa: E731  c only
    with torch.no_grad():
        clean = model(ids)
        with intervene(model, "state", 0, torch.full((3,), t), bump):
            got = model(ids)
        _loop(model, monkeypatch)
        with intervene(model, "state", 0, torch.full((3,), t), bump):
            want = model(ids)
    torch.testing.assert_close(got[:, :t + 1], clean[:, :t + 1], rtol=1e-5, atol=1e-6)
    assert (got[:, t + 1] - clean[:, t + 1]).abs().amax() > 1e-4
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t", [7, 5])  # no row sits at 7; rows 1 and 2 sit at 5
def test_a_users_hook_during_a_per_row_call_runs_and_sees_the_loops_states(t, monkeypatch):
    model = _net("gru")
    base, bpos = _ids(6, 4), torch.tensor([2, 5, 5, 9, 0, 11])
    src = torch.randn(6, model.d_state, generator=torch.Generator().manual_seed(5))
    iv = ps.site_intervenable(model, "state", 0, _alignment(OrthogonalAlignment, model.d_state))
    seen = []  # the user's hook runs first: the state before any intervention at t
    handle = model.sites.state[t].register_forward_hook(lambda _m, _a, y: seen.append(y.clone()))
    try:
        with torch.no_grad():
            got = pr.interchange_vectors(iv, base, bpos, src)
            _loop(model, monkeypatch)
            want = pr.interchange_vectors(iv, base, bpos, src)
    finally:
        handle.remove()
    assert len(seen) == 2  # step t ran in both (the kernel cut there, then the loop)
    torch.testing.assert_close(seen[0], seen[1], rtol=1e-5, atol=1e-6)  # every row's step-t state
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_only_skips_the_vouched_hooks_outside_the_declared_steps(monkeypatch):
    model = _net("gru")
    fired = []
    hooks = [model.sites.state[t].register_forward_hook(lambda _m, _a, y, t=t: fired.append(t))
             for t in (2, 7)]
    calls = Calls(model, monkeypatch)
    try:
        with torch.no_grad(), model.sites.only("state", [7]):
            model(_ids(2, 0))
            assert fired == [7] and calls.kernel == 2  # [0-7] [8-11]: step 2 skipped
            with pytest.raises(RuntimeError, match="already active"):
                with model.sites.per_row("state", [7, 7]):
                    pass
        fired.clear()
        with torch.no_grad(), model.sites.only("state", [7], inert=lambda fn: False):
            model(_ids(2, 0))  # no hook vouched for: step 2 runs
        assert fired == [2, 7]
    finally:
        for h in hooks:
            h.remove()


def test_a_global_hook_runs_the_step_loop(monkeypatch):
    from torch.nn.modules.module import register_module_forward_hook

    model = _net("gru")
    calls = Calls(model, monkeypatch)
    handle = register_module_forward_hook(lambda m, a, y: None)
    try:
        model(_ids(2, 0))
    finally:
        handle.remove()
    assert calls.step == T and calls.kernel == 0
    model(_ids(2, 0))
    assert calls.kernel == 1  # nothing hooked: one call for the whole sequence


@pytest.mark.gpu
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_on_cuda_gathered_equals_the_loop_and_trains_in_eval_mode(cell, monkeypatch):
    model = _net(cell).cuda()  # eval mode: cuDNN's backward needs the kernel's train flag
    g = torch.Generator().manual_seed(8)
    base, bpos = _ids(64, 7).cuda(), torch.randint(0, T, (64,), generator=g).cuda()
    src = torch.randn(64, model.d_state, generator=g).cuda()
    inst = _alignment(OrthogonalAlignment, model.d_state).cuda()
    iv = ps.site_intervenable(model, "state", 0, inst)
    params = [p for p in inst.parameters() if p.requires_grad]

    def run():
        for p in params:
            p.grad = None
        out = pr.interchange_vectors(iv, base, bpos, src)
        out.square().sum().backward()
        return out.detach(), _grads(params)

    calls = Calls(model, monkeypatch)
    got, got_grads = run()
    assert calls.step == 0 and calls.kernel == 2
    _loop(model, monkeypatch)
    want, want_grads = run()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    g, w = torch.cat([x.flatten() for x in got_grads]), torch.cat([x.flatten() for x in want_grads])
    torch.testing.assert_close(g, w, rtol=0, atol=1e-4 * float(w.abs().max()))
