"""DAS on binding's `resolved` pairs, with a planted network that resolves each line as it
reads it: its site at a line's right-hand token holds the value that line's letter resolves
to (a 2-dim digit code), and its answer at `:` reads the site of the query's own line. The
pairs intervene at that line (their explicit positions), so a perfect code of the site gives
every pair's label, the unchanged ones included, and the value-matched shuffled control
writes another digit."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from study.analyses.das.alignment import OrthogonalAlignment
from study.analyses.das.controls import shuffled_sources, value_keys
from study.analyses.das.search import pair_right, site_data
from study.models.sites.modules import Sites
from study.tasks.binding.vocab import COLON, DIGIT0, EQ, LETTER0, VOCAB
from tests.analyses.test_das_letters import task  # noqa: F401  (the laptop variant, fixture)

WIDTH = 6  # the site's width


class LineResolver(nn.Module):
    """resid[0] at line k's right-hand token holds Q [c_v ; 0], c_v digit v on a circle, v
    the value line k resolves to (zeros elsewhere); the output at every position decodes the
    site at the query line's right-hand token. On chains of at most two hops (the laptop
    variant) the query's line is the only copy on its chain, so this network computes every
    answer from the line-resolved values."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(WIDTH, WIDTH, generator=g))
        angle = 2 * math.pi * torch.arange(10) / 10
        self.register_buffer("protos", 3 * torch.stack([angle.cos(), angle.sin()], 1))
        self.register_buffer("q", q)
        self.sites = Sites(resid=1)

    def forward(self, ids):  # ids (batch, T)
        b, T = ids.shape
        value, qline = resolve(ids.cpu().numpy())  # (b, T), (b,)
        pos = np.arange(T)[None, :]
        at = (pos % 4 == 2) & (value >= 0)  # (b, T): a right-hand token of a line
        code = (self.protos[torch.as_tensor(np.clip(value, 0, 9))]
                * torch.as_tensor(at)[..., None])  # (b, T, 2)
        x = torch.cat([code, torch.zeros(b, T, WIDTH - 2)], -1) @ self.q.T
        h = self.sites.resid[0](x)  # (batch, T, WIDTH)
        read = torch.as_tensor(np.clip(4 * qline + 2, 0, T - 1))  # (b,)
        r = h[torch.arange(b), read] @ self.q[:, :2]  # (batch, 2)
        digits = -((r[:, None, :] - self.protos) ** 2).sum(-1)  # (batch, 10)
        logits = torch.full((b, T, len(VOCAB)), -1e4)
        logits[..., DIGIT0:DIGIT0 + 10] = digits[:, None, :]
        return logits


def resolve(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run a program or a prefix of one (b, T) line by line: the value each line resolves to
    at its right-hand token ((b, T), -1 elsewhere), and the query's line where `:` is read
    ((b,), -1 before it)."""
    b, T = ids.shape
    ids = ids.astype(np.int64)
    rows = np.arange(b)
    held = np.full((b, 26), -1)  # each letter's value
    last = np.full((b, 26), -1)  # each letter's last line
    value = np.full((b, T), -1)
    for k in range((T - 3) // 4 + 1):
        if 4 * k + 2 >= T:
            break
        lhs, rhs = ids[:, 4 * k] - LETTER0, ids[:, 4 * k + 2]
        is_line = (lhs >= 0) & (lhs < 26) & (ids[:, 4 * k + 1] == EQ)
        digit = (rhs >= DIGIT0) & (rhs < DIGIT0 + 10)
        v = np.where(digit, rhs - DIGIT0, held[rows, np.clip(rhs - LETTER0, 0, 25)])
        value[:, 4 * k + 2] = np.where(is_line, v, -1)
        on = rows[is_line]
        held[on, lhs[is_line]], last[on, lhs[is_line]] = v[is_line], k
    colon = np.argmax(ids == COLON, 1)
    asked = (ids == COLON).any(1)
    q = np.clip(ids[rows, np.maximum(colon - 1, 0)] - LETTER0, 0, 25)
    return value, np.where(asked, last[rows, q], -1)


def perfect(model) -> OrthogonalAlignment:
    """The OAF whose first 2 dims are exactly the digit code's plane."""
    inst = OrthogonalAlignment(WIDTH, 2)
    with torch.no_grad():
        inst.rotate_layer.weight = model.q
    return inst.eval()


def test_a_line_resolver_follows_the_resolved_pairs_at_the_line(task):  # noqa: F811
    model = LineResolver().eval()
    train, test = (task.counterfactuals("resolved", n, split, 0)
                   for n, split in ((300, "train"), (600, "test")))
    data = site_data(model, train, test, "resid", 0, -1, "cpu", outputs=task)
    assert np.array_equal(data.test.base_pos.numpy(), test.base_pos)  # the line, not `:`
    changed, tested = data.test.changed.numpy(), data.test.tested.numpy()
    assert np.array_equal(tested, changed) and 0.4 < changed.mean() < 0.6
    right = pair_right(model, data, perfect(model), "test").numpy()
    # every changed pair takes the source's value; every unchanged one keeps the base's answer
    assert right.all()
    # matched by value: each source gives line i another digit, so the code writes it
    keys = value_keys(train), value_keys(test)
    shuffled = shuffled_sources(data, *keys, seed=0, pairs=(train, test), task=task)
    scored = shuffled.test.tested.numpy()
    assert scored.sum() > 0.8 * tested.sum()
    assert pair_right(model, shuffled, perfect(model), "test").numpy()[scored].mean() <= 0.02
