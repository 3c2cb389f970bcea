"""The authors' training loop for assign-and-add (Exoo et al. 2026), transcribed from their
code, `bexoo/assign-and-add` train.py (commit d60c064), for the step-by-step comparison in
`compare_assign_add.py`.

Only what a training update depends on is kept, in the authors' words where possible:
- the constants (train.py, top of the file);
- the (variable, form, pair) row table `perm_table`, the kept operand pairs `sel_pairs` and the
  training rows `train_idx` (train.py, `rebuild_data_splits`, which `train()` calls);
- `build_sequence` (one training sequence from one row);
- the prefetch workers' sampling (`_BatchPrefetcher.worker_main`): rows uniform over
  `train_idx` from a numpy generator, the rest from Python's `random`, both seeded from
  (SEED, worker id). The authors' worker id is the process id, so their batch stream is not
  reproducible; here one worker with a fixed id stands in for their 16;
- the HookedTransformer of `train()`, its layer-0 MLP zeroed and frozen, every bias frozen
  (`freeze_biases`), AdamW over the trainable parameters, and the loop body (autocast, the loss
  over `logits[:, -1, :MOD]`, GradScaler on CUDA).

`load_build_sequence(path)` takes `build_sequence` from a copy of the authors' train.py
instead of the transcription (the comparison's `--authors-train`), so that the batches are
their function's own output.
"""
from __future__ import annotations

import ast
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn

# --- constants (train.py) -------------------------------------------------------------------
MOD = 59  # numbers 0-58
PLUS, EQUAL, PAD = range(MOD, MOD + 3)
A_TOKEN = MOD + 3
VAR_LEN = 12
VARS = list(range(A_TOKEN, A_TOKEN + VAR_LEN))
RESTRICT_LEFT_HALF_VARS = 2
RESTRICT_RIGHT_HALF_VARS = 2
LEFT_RESTRICT_VARS = VARS[:RESTRICT_LEFT_HALF_VARS]  # never the right operand
RIGHT_RESTRICT_VARS = VARS[-RESTRICT_RIGHT_HALF_VARS:]  # never the left operand
# eval_pools.enumerate_valid_2var_pairs
VALID_2VAR_PAIRS = [(v1, v2) for v1 in VARS for v2 in VARS
                    if v1 != v2 and v1 not in RIGHT_RESTRICT_VARS and v2 not in LEFT_RESTRICT_VARS]
VOCAB = A_TOKEN + VAR_LEN
TOKEN_STRINGS = [str(i) for i in range(MOD)] + ["+", "=", "<PAD>"] + \
    [chr(ord("a") + i) for i in range(26)]
SEQ_LEN = 16
BATCH_SIZE = 512
D_MODEL = 128
N_HEADS = 1
N_LAYERS = 2
LR = 1e-3
WD = 0.02
BETAS = (0.9, 0.999)
MAX_STEPS = 30_000  # train.py's default ("shorten default so plots render quickly")
RELEASED_STEPS = 40_000  # the released run: checkpoints up to step 39,901; model_io MAX_STEPS
TRAIN_ON_2VAR = True
TWO_VAR_FREQUENCY = 1.0
TRAIN_PAIRS_FRAC = 0.7
NUMS_TRAIN_PAIRS = math.floor(TRAIN_PAIRS_FRAC * MOD * MOD)
TRAIN_FRAC = 1.00
SEED = 42
USE_AMP = True  # bf16 autocast on CUDA (AMP_DTYPE_CUDA = "bf16"), none on the CPU
REMOVE_LAYER_0_MLP = True


# --- rows and the training split --------------------------------------------------------------
@dataclass(frozen=True)
class Split:
    perm_table: torch.Tensor  # (V * 4 * N * N, 4) rows (variable token, typ, num1, num2)
    sel_pairs: frozenset  # the kept (num1, num2) pairs
    train_idx: torch.Tensor  # (n_train,) training rows, ascending


def make_split() -> Split:
    """perm_table is laid out (v, t, num1, num2), rows in that nesting order (the authors'
    einops rearrange "v t n m f -> (v t n m) f"); `pair_pool` lists the pairs in their first
    appearance, row-major (num1, num2)."""
    v, t, n1, n2 = np.meshgrid(np.array(VARS), np.arange(4), np.arange(MOD), np.arange(MOD),
                               indexing="ij")
    perm_table = torch.from_numpy(np.stack([v, t, n1, n2], -1).reshape(-1, 4).astype(np.int64))
    pair_pool = [(a, b) for a in range(MOD) for b in range(MOD)]
    sel_pairs = set(random.Random(SEED).sample(pair_pool, NUMS_TRAIN_PAIRS))
    rows = perm_table.numpy()
    kept = np.zeros((MOD, MOD), dtype=bool)
    kept[tuple(np.array(sorted(sel_pairs)).T)] = True
    var_tok, typ = rows[:, 0], rows[:, 1]
    mask = kept[rows[:, 2], rows[:, 3]]
    mask &= ~(np.isin(var_tok, LEFT_RESTRICT_VARS) & (typ == 2))
    mask &= ~(np.isin(var_tok, RIGHT_RESTRICT_VARS) & (typ == 1))
    mask &= (typ != 3) | (TRAIN_ON_2VAR & ~np.isin(var_tok, RIGHT_RESTRICT_VARS))
    assert TWO_VAR_FREQUENCY == 1.0 and TRAIN_FRAC == 1.0  # no further rows dropped
    return Split(perm_table, frozenset(sel_pairs), torch.from_numpy(np.flatnonzero(mask)))


# --- one sequence (train.py build_sequence; `random` is the worker's generator) ----------------
def build_sequence(row: torch.Tensor, random: random.Random):
    var_tok, typ, num1, num2 = row.tolist()

    if typ == 2:
        var_val = num2
    elif typ == 1 or typ == 3:
        var_val = num1
    else:
        var_val = random.randrange(MOD)

    core_len = 4
    assignment_len = 2
    max_assignments = min(len(VARS), (SEQ_LEN - core_len) // assignment_len)
    n_assignments = random.randint(1, max_assignments)

    assignments = [[var_tok, var_val]]

    if typ == 3:
        var1, var2 = random.choice(VALID_2VAR_PAIRS)
        assignments = [[var1, num1], [var2, num2]]
        if n_assignments < 2:
            n_assignments = 2
        num_distractors = n_assignments - 2
        extra_vars = [v for v in VARS if v != var1 and v != var2]
    else:
        num_distractors = n_assignments - 1
        extra_vars = [v for v in VARS if v != var_tok]

    random.shuffle(extra_vars)
    for _ in range(num_distractors):
        v = extra_vars.pop()
        assignments.append([v, random.randrange(MOD)])

    random.shuffle(assignments)

    remaining_pads = SEQ_LEN - (assignment_len * n_assignments + core_len)

    gaps = [0] * (n_assignments + 1)
    for _ in range(remaining_pads):
        gaps[random.randint(0, n_assignments)] += 1

    prefix = []
    for i, seg in enumerate(assignments):
        prefix.extend([PAD] * gaps[i])
        prefix.extend(seg)
    prefix.extend([PAD] * gaps[-1])

    if typ == 0:
        lhs_tok, rhs_tok = num1, num2
    elif typ == 1:
        lhs_tok, rhs_tok = var_tok, num2
    elif typ == 2:
        lhs_tok, rhs_tok = num1, var_tok
    else:
        lhs_tok, rhs_tok = var1, var2

    core = [PLUS, lhs_tok, rhs_tok, EQUAL]
    label = (num1 + num2) % MOD

    tok = torch.tensor(prefix + core, dtype=torch.long)
    assert tok.shape[0] == SEQ_LEN, "Generated sequence has incorrect length"
    return tok, label


def load_build_sequence(train_py: Path) -> Callable:
    """`build_sequence` from the authors' own train.py, run with the constants above; the
    returned function takes (row, random) like the transcription."""
    tree = ast.parse(Path(train_py).read_text())
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_sequence"]
    if len(defs) != 1:
        raise ValueError(f"{train_py}: no single top-level build_sequence")
    code = compile(ast.Module(body=defs, type_ignores=[]), str(train_py), "exec")
    names = dict(MOD=MOD, SEQ_LEN=SEQ_LEN, VARS=VARS, VALID_2VAR_PAIRS=VALID_2VAR_PAIRS,
                 PLUS=PLUS, EQUAL=EQUAL, PAD=PAD, torch=torch)

    def call(row, rnd):
        scope = {**names, "random": rnd}  # their module-level `random` is the worker's generator
        exec(code, scope)
        return scope["build_sequence"](row)
    return call


# --- the prefetch workers' sampling -----------------------------------------------------------
class Batches:
    """Training batches as one prefetch worker draws them (`worker_main`), with worker id
    `worker` in place of the authors' `os.getpid() & 0xFFFF`."""

    def __init__(self, split: Split, seed: int = SEED, worker: int = 0,
                 build: Callable = build_sequence):
        self.split, self.build = split, build
        self.pool_np = split.train_idx.cpu().numpy()
        self.rng_np = np.random.default_rng([seed, worker])
        self.rnd = random.Random((seed << 16) ^ worker)  # random.seed((seed_base << 16) ^ wid)

    def next(self, batch_size: int = BATCH_SIZE) -> tuple[np.ndarray, np.ndarray]:
        """-> (batch, SEQ_LEN) token ids, (batch,) labels."""
        sel = self.rng_np.integers(0, len(self.pool_np), size=batch_size)
        toks = np.empty((batch_size, SEQ_LEN), dtype=np.int64)
        labs = np.empty((batch_size,), dtype=np.int64)
        for bi, pi in enumerate(sel):
            row_idx = int(self.pool_np[pi])
            tok_t, lab = self.build(self.split.perm_table[row_idx], self.rnd)
            toks[bi, :] = tok_t.numpy()
            labs[bi] = int(lab)
        return toks, labs


# --- the model, the optimiser and one update (train.py `train`) --------------------------------
def freeze_biases(model: nn.Module) -> None:
    for name, param in model.named_parameters():
        if "b_" in name:
            param.requires_grad = False


def build_model(device: torch.device):
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    cfg = HookedTransformerConfig(
        n_layers=N_LAYERS, n_heads=N_HEADS, d_model=D_MODEL, d_head=D_MODEL // N_HEADS,
        d_mlp=4 * D_MODEL, n_ctx=SEQ_LEN, init_weights=True, d_vocab=VOCAB, d_vocab_out=MOD,
        act_fn="relu", device=device, normalization_type=None, seed=SEED)
    model = HookedTransformer(cfg).to(device)
    if REMOVE_LAYER_0_MLP:
        mlp = model.blocks[0].mlp
        with torch.no_grad():
            for p in (mlp.W_in, mlp.W_out, mlp.b_in, mlp.b_out):
                p.zero_()
        for p in (mlp.W_in, mlp.W_out, mlp.b_in, mlp.b_out):
            p.requires_grad = False
    freeze_biases(model)
    model.train()
    return model


class Trainer:
    """The loop body of train.py's `train()` for one batch: autocast (bf16 on CUDA), the loss
    over the last position's MOD logits, GradScaler on CUDA, AdamW, zero_grad."""

    def __init__(self, model, device: torch.device):
        self.model, self.device = model, device
        self.opt = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()),
                                     lr=LR, weight_decay=WD, betas=BETAS,
                                     fused=(device.type == "cuda"))
        self.loss_fn = nn.CrossEntropyLoss()
        self.amp_enabled = USE_AMP and device.type == "cuda"
        self.amp_dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
        # train.py: torch.cuda.amp.GradScaler(enabled=amp_enabled), the same object under its
        # current name; on the CPU none
        self.scaler = (torch.amp.GradScaler("cuda", enabled=self.amp_enabled)
                       if device.type == "cuda" else None)

    def step(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """(B, SEQ_LEN) ids, (B,) labels -> the loss of this update (0-d, detached)."""
        with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype,
                            enabled=self.amp_enabled):
            logits = self.model(src)
        logits_step = logits[:, -1, :MOD]
        loss = self.loss_fn(logits_step.float(), tgt)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()
