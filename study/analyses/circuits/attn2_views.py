"""Weight-level views of models with TransformerLens-style matrices (the `weights_view`
capability: `attn2`), and the assign-and-add progress measures of Exoo et al. 2026
(appendix B; `bexoo/assign-and-add`, `progress_measures.py`).

Needs W_E (vocab, d), W_pos (seq, d), W_U (d, vocab), blocks[l].attn.W_Q/W_K/W_V
(n_heads, d, d_head), W_O (n_heads, d_head, d), and for the MLP layer blocks[l].mlp.W_in,
W_out, act. OV_h = W_V[h] W_O[h] and QK_h = W_Q[h] W_K[h]ᵀ (d, d); "head -1" is the sum over
heads (the authors' einsum over h). Every function returns rows (layer, head, score, value).

Any task:
- `ov_copy_frac`: fraction of non-PAD tokens t whose direct OV path W_E[t] OV_h W_U has its
  largest logit on t itself (a copying head scores 1).
- `qk_prev_pos`: fraction of query positions q >= 1 whose positional score
  W_pos[q] QK_h W_pos[k]ᵀ over keys k < q is largest at k = q - 1.
Tasks whose `progress_measures()` give the facts (assign_add; `tasks/base.ProgressMeasures`):
- `qk_num_to_prev_var` [paper qk1_num_to_prev_var] (`prefix_len`): `qk_prev_pos` restricted
  to the assignment prefix positions 1..prefix_len-1, excluding q - 2 (a PAD or a number by
  the syntax) as the authors do.
- `qk_var_identity` [paper qk2_ov1_var_identity] (`variable_ids`): fraction of variables v
  whose layer-0-OV image scores highest against its own under layer 1's QK.
- `modulus` p, `number_ids` (residue r is token number_ids[r]), and `task.operands`:
- `ov_mlp_accuracy` [paper ov2_mlp2_accuracy]: over all p² pairs, the last MLP applied to
  OV(W_E[x]) + OV(W_E[y]) and unembedded onto the numbers predicts (x + y) mod p.
- `fourier_frac`, `fourier_freq_<i>`: the last MLP's pre-activations from one operand,
  W_E[x] OV W_in (p, d_mlp), as a function of x: share of their variance (mean over x
  removed) in the top-k frequencies, and those frequencies ([paper] Fourier features in the
  layer-2 MLP).
- `cos_premlp_ov` [paper §5.1]: mean cosine between the residual entering the last MLP at
  `=` and OV(W_E[x]) + OV(W_E[y]) for the sequence's operand values; `cos_premlp_ov_shuffled`
  pairs each residual with another sequence's operands (the paper's baseline).
"""
from __future__ import annotations

import numpy as np
import torch

from study.analyses.circuits.scores import cosine, fourier_fraction


def ov(attn) -> torch.Tensor:
    """(n_heads, d, d) OV circuits of an attention module."""
    return torch.einsum("hde,hef->hdf", attn.W_V, attn.W_O)


def qk(attn) -> torch.Tensor:
    """(n_heads, d, d) QK circuits."""
    return torch.einsum("hde,hfe->hdf", attn.W_Q, attn.W_K)


def with_sum(mats: torch.Tensor):
    """[(head, matrix)] per head, then (-1, the sum over heads)."""
    return [(h, mats[h]) for h in range(mats.shape[0])] + [(-1, mats.sum(0))]


@torch.no_grad()
def generic_rows(model, pad_id: int) -> list[tuple]:
    rows = []
    W_E, W_U, W_pos = model.W_E.float(), model.W_U.float(), model.W_pos.float()
    tokens = torch.tensor([t for t in range(W_E.shape[0]) if t != pad_id], device=W_E.device)
    for layer, block in enumerate(model.blocks):
        for h, m in with_sum(ov(block.attn).float()):
            logits = W_E[tokens] @ m @ W_U  # (tokens, vocab)
            rows.append((layer, h, "ov_copy_frac",
                         float((logits.argmax(-1) == tokens).float().mean())))
        for h, m in with_sum(qk(block.attn).float()):
            rows.append((layer, h, "qk_prev_pos", _prev_pos(W_pos @ m @ W_pos.T)))
    return rows


def _prev_pos(scores: torch.Tensor, skip_two_back: bool = False, n_pos: int | None = None) -> float:
    n_pos = n_pos or scores.shape[0]
    hits = 0
    for q in range(1, n_pos):
        row = scores[q, :q].clone()
        if skip_two_back and q >= 2:
            row[q - 2] = float("-inf")
        hits += int(row.argmax()) == q - 1
    return hits / max(n_pos - 1, 1)


@torch.no_grad()
def progress_rows(model, task, ids: np.ndarray, device, top_k: int = 5) -> list[tuple]:
    """The weight-level progress measures whose facts `task.progress_measures()` gives."""
    facts = task.progress_measures()
    W_E, W_pos = model.W_E.float(), model.W_pos.float()
    rows = []
    if facts.prefix_len > 1:  # [paper] positions 0-11 hold the assignments
        n_prefix = min(facts.prefix_len, W_pos.shape[0])
        for layer, block in enumerate(model.blocks):
            for h, m in with_sum(qk(block.attn).float()):
                rows.append((layer, h, "qk_num_to_prev_var",
                             _prev_pos(W_pos @ m @ W_pos.T, skip_two_back=True, n_pos=n_prefix)))
    if len(model.blocks) >= 2 and facts.variable_ids:
        var = W_E[torch.as_tensor(facts.variable_ids, device=W_E.device)]
        moved = var @ ov(model.blocks[0].attn).float().sum(0)
        sim = moved @ qk(model.blocks[1].attn).float().sum(0) @ moved.T
        ident = (sim.argmax(-1) == torch.arange(len(var), device=sim.device)).float().mean()
        rows.append((1, -1, "qk_var_identity", float(ident)))
    last = _last_mlp_layer(model)
    if last is None or facts.modulus < 2:
        return rows
    return rows + _modular_rows(model, task, ids, device, last, top_k)


def _modular_rows(model, task, ids, device, last: int, top_k: int) -> list[tuple]:
    facts = task.progress_measures()
    p = facts.modulus
    W_E, W_U = model.W_E.float(), model.W_U.float()
    numbers = torch.as_tensor(facts.number_ids, device=W_E.device)  # (p,) residue -> token
    rows = []
    block = model.blocks[last]
    OV = ov(block.attn).float().sum(0)
    nums = W_E[numbers] @ OV  # (p, d): OV image of each number's embedding
    mlp = block.mlp
    residues = torch.arange(p, device=nums.device)
    x, y = torch.meshgrid(residues, residues, indexing="ij")
    x, y = x.reshape(-1), y.reshape(-1)  # (p²,) every operand pair
    out = mlp.act((nums[x] + nums[y]) @ mlp.W_in.float()) @ mlp.W_out.float() @ W_U[:, numbers]
    right = (out.argmax(-1) == (x + y) % p).float().mean()
    rows.append((last, -1, "ov_mlp_accuracy", float(right)))
    frac, freqs = fourier_fraction((nums @ mlp.W_in.float()).cpu().numpy(), top_k)
    rows.append((last, -1, "fourier_frac", frac))
    rows += [(last, -1, f"fourier_freq_{i + 1}", float(f)) for i, f in enumerate(freqs)]
    operands = task.operands(ids)
    if operands is not None:
        rows += _premlp_cosines(model, ids, operands, device, last, nums)
    return rows


def _last_mlp_layer(model):
    with_mlp = [i for i, b in enumerate(model.blocks) if b.mlp is not None]
    return with_mlp[-1] if with_mlp else None


def _premlp_cosines(model, ids, operands, device, layer: int, nums: torch.Tensor) -> list[tuple]:
    from study.models.sites.capture import collect

    acts = collect(model, ids, [("resid", layer), ("attn_out", layer)], device)
    host = torch.device("cpu")  # `collect` returns host arrays: the cosines are taken there
    pre = torch.as_tensor(acts[("resid", layer)][:, -1] + acts[("attn_out", layer)][:, -1],
                          device=host)  # (n, d)
    x, y = (torch.as_tensor(v, device=host) for v in operands)  # (n,) operand values
    nums = nums.to(host)
    target = nums[x] + nums[y]  # (n, d)
    perm = torch.as_tensor(np.random.default_rng(0).permutation(len(ids)), device=host)
    return [(layer, -1, "cos_premlp_ov", float(cosine(pre, target).mean())),
            (layer, -1, "cos_premlp_ov_shuffled", float(cosine(pre, target[perm]).mean()))]
