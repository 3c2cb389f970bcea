"""Per-head attention scores and the Fourier measure, as plain functions of arrays.

Patterns are `capture_attention`'s (batch, n_heads, pos_query, pos_key), rows summing to 1.
Every score returns one number per head (n_heads,):

- `prev_token_score`: mean attention from a token to the token just before it, over query
  positions q >= 1 whose token and predecessor are not padding. An exact previous-token head
  scores 1; uniform causal attention scores the mean of 1/(q+1).
- `induction_score`: on [r_1..r_T, r_1..r_T] (T random tokens, repeated), mean attention from
  each second-half position q (T <= q < 2T) to q - T + 1, the token after the previous
  occurrence of the current one (the induction target; Olsson et al. 2022).
- `target_mass`: mean over query rows (example, query position) of the attention mass on the
  key positions of that example (the "attends to the chain / operands / values" scores).
- `target_topk`: fraction of query rows whose m most-attended keys are exactly the m key
  positions (m = number of keys of the row); Exoo et al.'s progress-measure criterion
  (argmax for one key, top-2 for the two operands).

`fourier_fraction(M, k)`: M (p, d) holds a function of a residue x = 0..p-1 (rows) in d
features (e.g. MLP pre-activations from operand x). After removing the mean over x, the
share of the remaining variance carried by the k strongest frequencies of the discrete
Fourier transform over x (a frequency's power counts both its cos and sin). Returns the
fraction and the frequencies, strongest first.
"""
from __future__ import annotations

import numpy as np
import torch


def prev_token_score(pattern: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
    b, h, n_q, _ = pattern.shape
    q = torch.arange(1, n_q, device=pattern.device)
    vals = pattern[:, :, q, q - 1]  # (b, h, n_q - 1)
    if live is None:
        return vals.mean(dim=(0, 2))
    ok = (live[:, 1:] & live[:, :-1]).to(vals.dtype)  # (b, n_q - 1)
    return (vals * ok[:, None]).sum(dim=(0, 2)) / ok.sum().clamp_min(1)


def induction_score(pattern: torch.Tensor, T: int) -> torch.Tensor:
    q = torch.arange(T, 2 * T, device=pattern.device)
    return pattern[:, :, q, q - T + 1].mean(dim=(0, 2))


def target_sums(pattern: torch.Tensor, query: torch.Tensor, keys: torch.Tensor,
                topk: bool = True):
    """(mass summed over query rows (h,), top-k hits summed over query rows (h,) or None,
    number of query rows). query (b, pos) bool; keys (b, pos) bool, the same key positions
    for every query row of an example, or (b, pos_query, pos_key) bool, keys per row."""
    per_row = keys if keys.dim() == 3 else keys[:, None, :].expand(-1, pattern.shape[2], -1)
    mass = (pattern * per_row[:, None].to(pattern.dtype)).sum(-1)  # (b, h, q)
    qf = query.to(pattern.dtype)
    if not topk:
        return (mass * qf[:, None]).sum(dim=(0, 2)), None, float(qf.sum())
    m = per_row.sum(dim=-1)  # (b, q) keys per row
    ranks = pattern.argsort(dim=-1, descending=True).argsort(dim=-1)  # rank of each key
    # a row hits when every one of its m keys ranks among the top m
    top = ((ranks < m[:, None, :, None]) | ~per_row[:, None]).all(dim=-1)  # (b, h, q)
    hits = (top & (m > 0)[:, None]).to(pattern.dtype)
    return ((mass * qf[:, None]).sum(dim=(0, 2)), (hits * qf[:, None]).sum(dim=(0, 2)),
            float(qf.sum()))


def target_mass(pattern, query, keys) -> torch.Tensor:
    mass, _, rows = target_sums(pattern, query, keys)
    return mass / max(rows, 1.0)


def target_topk(pattern, query, keys) -> torch.Tensor:
    _, hits, rows = target_sums(pattern, query, keys)
    return hits / max(rows, 1.0)


def repeated_random_tokens(n: int, T: int, vocab_size: int, exclude=(),
                           seed: int = 0) -> np.ndarray:
    """(n, 2T) ids: T tokens drawn from the vocabulary minus `exclude`, then the same T again.
    Tokens are distinct within a half when the vocabulary allows it (so the previous
    occurrence of a token is unique)."""
    rng = np.random.default_rng(seed)
    pool = np.array([t for t in range(vocab_size) if t not in set(exclude)])
    replace = len(pool) < T
    half = np.stack([rng.choice(pool, size=T, replace=replace) for _ in range(n)])
    return np.concatenate([half, half], axis=1).astype(np.int64)


def fourier_fraction(M: np.ndarray, top_k: int) -> tuple[float, list[int]]:
    M = np.asarray(M, dtype=np.float64)
    p = M.shape[0]
    F = np.fft.rfft(M - M.mean(axis=0, keepdims=True), axis=0)  # (p // 2 + 1, d)
    power = (np.abs(F[1:]) ** 2).sum(axis=1)  # (n_freq,) frequencies 1 .. p // 2
    power[: (p - 1) // 2] *= 2  # cos and sin halves; an even p's Nyquist term has one
    total = power.sum()
    order = np.argsort(-power)
    if total <= 0:
        return 0.0, []
    top = order[:top_k]
    return float(power[top].sum() / total), [int(f) + 1 for f in top]


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine similarity of (n, d) tensors -> (n,)."""
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


# --- drivers over a model ------------------------------------------------------------------

@torch.no_grad()
def patterns_of(model, ids: np.ndarray, device) -> list[torch.Tensor]:
    """Per-layer attention patterns (batch, n_heads, pos, pos) of one batch."""
    from study.models.nets.attention import capture_attention

    with capture_attention(model) as pats:
        model(torch.as_tensor(ids, device=device))
    return [p.float() for p in pats]


@torch.no_grad()
def task_head_scores(model, task, ids: np.ndarray, device, batch_size: int = 128) -> list[tuple]:
    """Rows (layer, head, score, value) of the scores read on task sequences: `prev_token`,
    `attn_to_<target>` (mass, per head) for each of the task's attention targets and, for
    the targets the task names in `progress_measures().topk_targets` (Exoo et al.'s), the
    top-k criterion per head and for the head-summed pattern (head -1)."""
    from study.models.sites.capture import batches

    targets = task.attention_targets(ids)  # name -> (query (n, pos), keys)
    topk = task.progress_measures().topk_targets
    acc: dict[tuple, list] = {}

    def add(key, num, den):
        cur = acc.setdefault(key, [0.0, 0.0])
        cur[0] = cur[0] + num.cpu()
        cur[1] += den

    for s in batches(len(ids), batch_size):
        b_ids = ids[s]
        live = torch.as_tensor(b_ids != task.pad_id, device=device)
        pats = patterns_of(model, b_ids, device)
        n_live = float((live[:, 1:] & live[:, :-1]).sum())
        for layer, pat in enumerate(pats):
            add((layer, "prev_token"), prev_token_score(pat, live) * n_live, n_live)
            for name, (q, k) in targets.items():
                q_t = torch.as_tensor(q[s], device=device)
                k_t = torch.as_tensor(k[s], device=device)
                mass, _, rows = target_sums(pat, q_t, k_t, topk=False)
                add((layer, f"attn_to_{name}"), mass, rows)
                if name in topk:
                    both = torch.cat([pat, pat.sum(1, keepdim=True)], dim=1)
                    _, hits, rows = target_sums(both, q_t, k_t, topk=True)
                    add((layer, topk[name]), hits, rows)
    out = []
    for (layer, score), (num, den) in acc.items():
        vals = (num / max(den, 1.0)).tolist()
        n_heads = pats[layer].shape[1]
        for h, v in enumerate(vals):
            out.append((layer, h if h < n_heads else -1, score, float(v)))
    return out


@torch.no_grad()
def induction_rows(model, task, n: int, T: int, device, batch_size: int = 128,
                   seed: int = 0) -> list[tuple]:
    """Rows (layer, head, "induction", score) on n repeated random sequences of 2T tokens."""
    from study.models.sites.capture import batches

    ids = repeated_random_tokens(n, T, len(task.vocab), exclude=(task.pad_id,), seed=seed)
    sums = None
    for s in batches(n, batch_size):
        pats = patterns_of(model, ids[s], device)
        got = torch.stack([induction_score(p, T) * (s.stop - s.start) for p in pats]).cpu()
        sums = got if sums is None else sums + got
    scores = sums / n  # (layers, heads)
    return [(layer, h, "induction", float(scores[layer, h]))
            for layer in range(scores.shape[0]) for h in range(scores.shape[1])]
