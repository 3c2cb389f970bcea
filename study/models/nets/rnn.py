"""The recurrent network of the `gru` and `lstm` families: one cell unrolled over time
(docs/models/rnn.md).

    ids (batch, pos) -> embedding (batch, pos, d_embed)
      -> for t: state_t = cell(x_t, state_{t-1}); state_t = sites.state[t](state_t)
      -> output MLP at every position on h: d_hidden -> d_mlp -> vocab   (GELU, dropout)

Each time step has its own site `sites.state[t]` (pyvene's per-timestep unit is broken):
what leaves it is what both the next step and the head at t read, so replacing state[t]
changes the logits at t and later and nothing before. The LSTM's analysed state is [h, c]
(batch, 2 * d_hidden) and its head reads h alone [paper code: grantsrb/mas `seq_models.py`].
The gates and parameters are nn.GRUCell's / nn.LSTMCell's; under bf16 autocast the state
stays float32.

`model(ids)` is teacher-forced; `model(ids, feed=mask)` runs free: the input at each True
position is the argmax of the logits one step before [paper code: grantsrb/mas
`RNN.forward`].

Fused kernel [ours]: torch's GRU/LSTM kernel (`_kernel`) runs the same weights instead of the
step loop, the state sites only where a hook reads or replaces a step. `_plan` picks the mode
of a teacher-forced forward: segmented (the kernel cut at each hooked step), gathered (under
a `Sites.per_row` declaration, each row at its own step in two packed calls, or in one from
each row's step on where the declaration hands in the rows' clean states there) or the loop
(torch.compile, CUDA-graph capture, a global hook); free-running uses the kernel by
fixed-point passes (`_free_fused`). Every mode computes the loop's function: the modes, their
costs and what is tested of them are in docs/models/rnn.md.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from study.models.sites import SiteKind
from study.models.sites.modules import Sites
from study.core.fixed_point import settle_inputs

_ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}
SETTLE_PASSES = 3  # no-gradient passes a free-running batch may take to settle
FUSED_FREE_DEVICES = ("cuda",)  # device types whose free-running uses the fused kernel
MAX_SEGMENTS = 3  # a per-row declaration with more hooked steps than this runs gathered


class RecurrentLM(nn.Module):
    """Embedding -> one GRU/LSTM cell unrolled with a state site per token -> output MLP."""

    merges_rows = True  # honours `Sites.per_row(merged=True)` in every mode (`_plan`)

    def __init__(self, config, vocab_size: int, seq_len: int):
        super().__init__()
        self.config = config
        self.is_lstm = config.cell == "lstm"
        self.d_hidden = config.d_hidden
        self.d_state = config.d_state
        self.n_steps = seq_len  # bounds the state[t] index
        self.n_layers, self.n_heads = 1, 0  # one recurrent cell, no attention
        self.embed = nn.Embedding(vocab_size, config.d_embed)
        cell_cls = nn.LSTMCell if self.is_lstm else nn.GRUCell
        self.cell = cell_cls(config.d_embed, config.d_hidden)
        self.sites = Sites(state=seq_len)
        self.head = nn.Sequential(  # reads h (batch, d_hidden) [authors]
            nn.Linear(self.d_hidden, config.d_mlp),
            _ACTIVATIONS[config.activation](),
            nn.Dropout(config.dropout),  # on the hidden layer [paper]
            nn.Linear(config.d_mlp, vocab_size),
        )

    def site_kinds(self) -> list[SiteKind]:
        """The one site kind of a recurrent network: the state after every token."""
        return [SiteKind("state", self.n_steps, self.d_state)]

    def forward(self, ids: torch.Tensor, readout: torch.Tensor | None = None,
                feed: torch.Tensor | None = None) -> torch.Tensor:
        """ids (batch, pos) -> logits (batch, pos, vocab); with `readout` (batch, pos) bool, only
        the logits of the True positions, (n_true, vocab), in row-major order (analyses that
        score a few positions skip the output layer everywhere else). With `feed` (batch, pos)
        bool, the input at each True position is the argmax of the logits one step before
        instead of ids (free-running)."""
        batch, pos = ids.shape  # (batch, pos)
        if pos > self.n_steps:
            raise ValueError(f"sequence of {pos} tokens, the network was built for {self.n_steps}")
        if feed is not None:
            return self._free(ids, feed, readout)
        mode, arg = self._plan(batch, pos)
        if mode == "segmented":
            out = self._segmented(self.embed(ids), arg)  # (batch, pos, d_hidden)
            return self.head(out if readout is None else out[readout])
        if mode == "gathered":
            out = self._gathered(self.embed(ids), *arg)  # (batch, pos, d_hidden)
            return self.head(out if readout is None else out[readout])
        x = self.embed(ids)  # (batch, pos, d_embed)
        gi = F.linear(x, self.cell.weight_ih, self.cell.bias_ih)  # (batch, pos, gates * H)
        h, c = self._init(x)
        states = []
        site = None if arg is None else self._merged_site(gi, arg)
        for t in range(pos):
            h, c, s = self._step(gi[:, t], h, c, t, site)
            states.append(s)
        states = torch.stack(states, dim=1)  # (batch, pos, d_state)
        out = states[..., :self.d_hidden]  # h: what the head reads (batch, pos, d_hidden)
        return self.head(out if readout is None else out[readout])  # (batch, pos, vocab)

    # --- the fused kernel -----------------------------------------------------------
    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.flatten_weights()  # a move to CUDA gives each weight its own block again
        return out

    def flatten_weights(self) -> None:
        """On CUDA, make the cell's four weights views of one block in cuDNN's layout, as
        nn.GRU / nn.LSTM keep theirs (`flatten_parameters`): cuDNN reads separate weights only
        after copying them into one block at every call, with a warning each time. The
        parameters stay the same objects (an optimiser holding them is unaffected); on the
        CPU nothing changes."""
        cell = self.cell
        weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
        first = weights[0]
        if not (first.is_cuda and torch.backends.cudnn.is_acceptable(first)
                and all(w.is_cuda and w.dtype == first.dtype for w in weights)):
            return
        from torch.backends.cudnn import rnn as cudnn_rnn

        with torch.cuda.device_of(first), torch.no_grad():
            if torch._use_cudnn_rnn_flatten_weight():
                torch._cudnn_rnn_flatten_weight(
                    weights, 4, cell.input_size,
                    cudnn_rnn.get_cudnn_mode("LSTM" if self.is_lstm else "GRU"),
                    cell.hidden_size, 0, 1, True, False)  # proj 0, 1 layer, batch-first, one way

    def _plan(self, batch: int, pos_len: int):
        """How a teacher-forced forward of (batch, pos_len) tokens runs its state sites:
        ("loop", merged) | ("segmented", hooked steps) | ("gathered", (pos, hooked steps,
        the rows' clean states at pos or None)), the steps sorted (docs/models/rnn.md). Under
        a merged `per_row` declaration the gathered mode runs the one site that acts for
        every row, once; the loop (`merged`:
        (pos (batch,) on the CPU, that site's step), else None) applies it at each row's step."""
        declared = self.sites.declared_rows("state")
        merged = (declared[0], declared[1][0]) if declared is not None and declared[2] else None
        if torch.compiler.is_compiling() or (torch.cuda.is_available()
                                             and torch.cuda.is_current_stream_capturing()):
            return "loop", merged
        steps = self.sites.hooked_steps("state", pos_len)
        if steps is None:  # a global hook: every site call is watched
            return "loop", merged
        if declared is not None and (merged is not None or len(steps) > MAX_SEGMENTS):
            pos, own, _ = declared
            if (len(pos) == batch and 0 <= int(pos.min()) and int(pos.max()) < pos_len
                    and set(steps) <= set(own)):
                clean = self.sites.declared_clean("state")
                if clean is not None and tuple(clean.shape) != (batch, self.d_state):
                    raise ValueError(f"per_row(clean=...): {tuple(clean.shape)} for a batch of "
                                     f"{batch} states of width {self.d_state}")
                return "gathered", (pos, own[:1] if merged is not None else steps, clean)
            if merged is not None:
                return "loop", merged
        return "segmented", steps

    def _kernel(self, x, h, c, lengths=None, read=None):
        """torch's GRU/LSTM kernel on the cell's weights, float32, autocast off.
        x (batch, L, d_embed); h, c (1, batch, H) the initial state (c None for the GRU)
        -> (y (batch, L, H) float32, h_n (1, batch, H), c_n (1, batch, H) or None).
        `lengths` (batch,) int64 on the CPU, each >= 1: row i's first lengths[i] inputs only,
        packed (h_n, c_n are then each row's own last step), and y is (batch, P, H), row i's
        outputs at its steps read[i] ((batch, P) int64 on the CPU, each < lengths[i]), taken
        from the packed outputs by one gather (pad_packed_sequence copies step by step,
        forward and backward), or None without `read`."""
        cell = self.cell
        params = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
        # cuDNN keeps what its backward needs only with train=True; with one layer and no
        # dropout the flag changes nothing else (analyses train alignments in eval mode)
        train = self.training or torch.is_grad_enabled()
        with torch.autocast(x.device.type, enabled=False):
            x = x.float()
            if lengths is None:
                if self.is_lstm:
                    return torch._VF.lstm(x, (h, c), params, True, 1, 0.0, train, False, True)
                y, h = torch._VF.gru(x, h, params, True, 1, 0.0, train, False, True)
                return y, h, None
            # rows by decreasing length, as pack_padded_sequence(enforce_sorted=False) sorts
            lengths, order = torch.sort(lengths, descending=True)  # (batch,) on the CPU
            rank = torch.empty_like(order)
            rank[order] = torch.arange(len(order), device=order.device)  # row i's place, packed
            srt, uns = order.to(x.device), rank.to(x.device)
            p = pack_padded_sequence(x.index_select(0, srt), lengths, batch_first=True)
            if self.is_lstm:
                out, h, c = torch._VF.lstm(p.data, p.batch_sizes, (h[:, srt], c[:, srt]),
                                           params, True, 1, 0.0, train, False)
            else:
                out, h = torch._VF.gru(p.data, p.batch_sizes, h[:, srt], params, True, 1, 0.0,
                                       train, False)
                c = None
            y = None
            if read is not None:  # out (sum of lengths, H): step s of rank r at start[s] + r
                start = torch.cumsum(p.batch_sizes, 0) - p.batch_sizes  # (L,)
                at = (start[read] + rank[:, None]).flatten().to(x.device)  # (batch * P,)
                y = out.index_select(0, at).view(*read.shape, out.shape[-1])
            return y, h[:, uns], (None if c is None else c[:, uns])

    def _site_state(self, t: int, h, c) -> torch.Tensor:
        """sites.state[t] on the kernel's state h, c (1, batch, H) -> its output
        (batch, d_state), handed in as the loop hands it: a fresh [h, c] (LSTM), a copy of h."""
        s = torch.cat([h[0], c[0]], 1) if self.is_lstm else h[0].clone()
        return self.sites.state[t](s)

    def _split(self, s: torch.Tensor):
        """A state (batch, d_state) -> the kernel's initial (h, c), (1, batch, H) float32
        contiguous each (cuDNN refuses a strided one); c None for the GRU."""
        H = self.d_hidden
        h = s[:, :H].float()[None].contiguous()
        return h, (s[:, H:].float()[None].contiguous() if self.is_lstm else None)

    def _segmented(self, x: torch.Tensor, steps: list[int]) -> torch.Tensor:
        """x (batch, T, d_embed) -> h (batch, T, d_hidden): the kernel between the sorted
        `steps`, each step's site run on the whole batch's state there (the loop's
        computation, cut where a hook reads or replaces the state)."""
        B, T = x.shape[:2]
        h = x.new_zeros(1, B, self.d_hidden, dtype=torch.float32)
        c = h if self.is_lstm else None
        pieces, start = [], 0
        for t in steps:
            y, h, c = self._kernel(x[:, start:t + 1], h, c)  # (B, t + 1 - start, H)
            s = self._site_state(t, h, c)  # (B, d_state)
            h, c = self._split(s)
            pieces += [y[:, :-1], s[:, None, :self.d_hidden].to(y.dtype)]  # the head reads h
            start = t + 1
        if start < T or not pieces:
            pieces.append(self._kernel(x[:, start:], h, c)[0])
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, 1)

    def _own_states(self, x: torch.Tensor, pos: torch.Tensor, read=None):
        """The clean kernel up to each row's own step, packed by length pos + 1, so that h_n
        (and the LSTM's c_n) are each row's own step and no row runs past it (one call up to
        the last row's step would compute every row's later steps too). x (batch, T, d_embed);
        pos (batch,) int64 on the CPU; `read` as `_kernel`'s -> (the own-step states
        (batch, d_state) float32, h at the steps `read` (batch, P, H) or None)."""
        h0 = x.new_zeros(1, x.shape[0], self.d_hidden, dtype=torch.float32)
        y, hn, cn = self._kernel(x[:, :int(pos.max()) + 1], h0, h0 if self.is_lstm else None,
                                 lengths=pos + 1, read=read)
        return (torch.cat([hn[0], cn[0]], 1) if self.is_lstm else hn[0].clone()), y

    @torch.no_grad()
    def clean_states(self, ids: torch.Tensor, pos) -> torch.Tensor:
        """Each row's state at its own step pos[i], no site run: ids (batch, pos_len), pos
        (batch,) ints -> (batch, d_state) float32, the gathered mode's own computation before
        it intervenes there (`_own_states`): what `Sites.per_row(clean=...)` takes, so that
        a forward intervening at those steps starts each row there."""
        pos = torch.as_tensor(pos).reshape(-1).long().cpu()  # (batch,)
        return self._own_states(self.embed(ids), pos)[0]

    def _gathered(self, x: torch.Tensor, pos: torch.Tensor, steps: list[int],
                  clean: torch.Tensor | None = None) -> torch.Tensor:
        """x (batch, T, d_embed); pos (batch,) int64 on the CPU, row i's own step; `steps` the
        hooked ones, sorted; `clean` (batch, d_state) or None, each row's clean state at its
        step read beforehand (`Sites.per_row(clean=...)`) -> h (batch, T, d_hidden).
        1. The rows' clean states at their own steps (`_own_states`), with their h before
           them; given as `clean`, nothing before each row's step is computed, and h there
           is NaN (the caller reads none of it: a misread shows).
        2. The sites of `steps` in turn on the (batch, d_state) tensor of own-step states
           (`Sites.per_row`: the hooks at t touch the rows at t only).
        3. One packed call from each row's new state over its T - 1 - pos remaining steps,
           left-aligned; then per row: clean before pos, the site's h at pos, the rest after."""
        H, (B, T), dev = self.d_hidden, x.shape[:2], x.device
        first = int(pos.min())
        steps_cpu = torch.arange(T, device="cpu")[None, :]  # (1, T): indices for the packed call
        if clean is None:  # h before each row's step: its own h at min(t, pos) (B, T, H)
            state, prefix = self._own_states(x, pos, torch.minimum(steps_cpu, pos[:, None]))
        else:  # a copy: the sites' hooks may write into what they are handed
            state, prefix = clean.float().clone(), float("nan")
        for t in steps:
            state = self.sites.state[t](state)
        pos_d = pos.to(dev, non_blocking=True)
        t_idx = torch.arange(T, device=dev)[None, :]  # (1, T)
        before = (t_idx < pos_d[:, None])[..., None]  # (B, T, 1)
        at = (t_idx == pos_d[:, None])[..., None]
        h_new = state[:, None, :H].to(torch.float32)  # (B, 1, H): what the head reads at pos
        L = T - 1 - first  # the longest remainder
        if L <= 0:  # every row at the last step
            return torch.where(before, prefix, h_new.expand(B, T, H))
        src = (pos_d[:, None] + 1 + torch.arange(L, device=dev)[None, :]).clamp_max(T - 1)
        xs = x.gather(1, src[..., None].expand(-1, -1, x.shape[2]))  # (B, L, d_embed)
        h1, c1 = self._split(state)
        j = (steps_cpu - pos[:, None] - 1).clamp(0, L - 1)  # (B, T): index into the remainder
        after = self._kernel(xs, h1, c1, lengths=(T - 1 - pos).clamp_min(1), read=j)[0]
        return torch.where(before, prefix, torch.where(at, h_new, after))  # (B, T, H)

    def _fusable(self) -> bool:
        return not torch.compiler.is_compiling() and not self.sites.hooked("state")

    def _fused(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, pos, d_embed) -> h at every step (batch, pos, d_hidden), float32, by
        torch's GRU/LSTM kernel on the cell's weights, no site run."""
        h0 = x.new_zeros(1, x.shape[0], self.d_hidden, dtype=torch.float32)  # (layers, batch, H)
        return self._kernel(x, h0, h0 if self.is_lstm else None)[0]

    def _head(self, h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The output MLP with a given dropout mask (..., d_mlp) (None: the head as is)."""
        if mask is None:
            return self.head(h)
        first, act, _, last = self.head
        return last(act(first(h)) * mask)

    def _free_fused(self, ids, feed, readout):
        """Free-running by fixed-point passes of the fused kernel (docs/models/rnn.md), or None
        when the batch has not settled in SETTLE_PASSES passes."""
        p = self.head[2].p
        mask = None
        if self.training and p > 0:  # one dropout mask for all passes, as one unroll draws
            keep = torch.full((*ids.shape, self.head[0].out_features), 1 - p, device=ids.device)
            mask = torch.bernoulli(keep) / (1 - p)  # (batch, pos, d_mlp)
        cur, settled = settle_inputs(
            lambda x: self._head(self._fused(self.embed(x)), mask).argmax(-1), ids, feed,
            SETTLE_PASSES)
        if not settled:
            return None
        h = self._fused(self.embed(cur))  # (batch, pos, d_hidden)
        if readout is None:
            return self._head(h, mask)
        return self._head(h[readout], None if mask is None else mask[readout])

    def _free(self, ids, feed, readout):
        """The free-running unroll: the head runs at every step and its argmax is the next
        input where `feed` is set. -> logits (batch, pos, vocab) or (n_true, vocab)."""
        if self._fusable() and ids.device.type in FUSED_FREE_DEVICES:
            out = self._free_fused(ids, feed, readout)
            if out is not None:
                return out
        cell = self.cell
        h, c = self._init(ids)
        logits = []
        for t in range(ids.shape[1]):
            x_t = self.embed(ids[:, t])  # (batch, d_embed)
            if t > 0:  # the previous prediction, a detached index [authors]
                own = self.embed(logits[-1].argmax(-1).detach())
                x_t = torch.where(feed[:, t, None], own, x_t)
            h, c, _ = self._step(F.linear(x_t, cell.weight_ih, cell.bias_ih), h, c, t)
            logits.append(self.head(h))  # (batch, vocab)
        logits = torch.stack(logits, dim=1)  # (batch, pos, vocab)
        return logits if readout is None else logits[readout]

    def _init(self, x):
        """Zero (h, c), each (batch, H), for x's batch (dim 0); c is None for the GRU.
        Float32 even under autocast: keeps the recurrence exact."""
        h = x.new_zeros(x.shape[0], self.d_hidden, dtype=torch.float32)
        return h, (h.clone() if self.is_lstm else None)

    def _step(self, gi_t, h, c, t, site=None):
        """One cell step from the input projection gi_t (batch, gates * H) -> (h, c, the
        state after the site: (batch, d_state)). `site(t, state) -> state` replaces the call
        of sites.state[t] (`_merged_site`)."""
        H = self.d_hidden
        site = site or self._site
        gates_h = F.linear(h, self.cell.weight_hh, self.cell.bias_hh)
        if self.is_lstm:
            i, f, g, o = (gi_t + gates_h).chunk(4, dim=1)  # (batch, H) each
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            s = site(t, torch.cat([h, c], dim=1))  # (batch, 2H)
            return s[:, :H], s[:, H:], s
        rz = torch.sigmoid(gi_t[:, : 2 * H] + gates_h[:, : 2 * H])  # (batch, 2H): r, z
        r, z = rz[:, :H], rz[:, H:]
        n = torch.tanh(gi_t[:, 2 * H:] + r * gates_h[:, 2 * H:])
        h = site(t, n + z * (h - n))  # (1 - z) * n + z * h, (batch, H)
        return h, None, h

    def _site(self, t: int, s: torch.Tensor) -> torch.Tensor:
        return self.sites.state[t](s)

    def _merged_site(self, gi: torch.Tensor, merged):
        """The step loop's site under a merged `per_row` declaration (`_plan`: (pos (batch,)
        on the device, t0)): a first pass without sites reads each row's state at its own
        step, the acting site sites.state[t0] runs once on those (pyvene calls each of its
        hooks once per forward), and the returned site(t, state) puts row i's result in at
        step pos[i] (the loop's second pass). gi (batch, pos, gates * H); pos on the CPU."""
        pos, t0 = merged[0].to(gi.device, non_blocking=True), merged[1]
        h, c = self._init(gi)
        own = None
        for t in range(gi.shape[1]):
            h, c, s = self._step(gi[:, t], h, c, t, lambda _t, s_: s_)
            own = s if own is None else torch.where((pos == t)[:, None], s, own)
        new = self.sites.state[t0](own)  # (batch, d_state)
        return lambda t, s: torch.where((pos == t)[:, None], new.to(s.dtype), s)
