"""Does `task=assign_add model=attn2 scale=paper` train exactly as the authors' code?

Exoo et al. 2026 trained their model with `bexoo/assign-and-add` train.py (TransformerLens).
This script builds both and compares them, in three parts:

1. Settings, read off the built objects: the authors' HookedTransformer, AdamW and loop
   (`authors_train.py`, transcribed from train.py) against the resolved `scale=paper` run
   configuration (`study.run.config.resolve`), our network, our `Engine`'s AdamW,
   `study.train.schedule.lr_at` and the runtime of `study.train.runtime.resolve_runtime`.
   Each row is `same`, `kept: <why>` (a known difference, documented) or `DIFFERS`.
2. Data: sequences from the authors' batch sampler and from our `task.train_batch`, compared
   statistic by statistic (chi-square test of homogeneity), plus hard checks (no held-out pair,
   no variable in a restricted position, no variable assigned twice).
3. Training, update for update: the authors' initial weights are copied into our network
   (same TransformerLens names and shapes; our unembedding's 15 extra non-number columns keep
   their own values), and both loops take the same batches, the authors' sampler's output, for
   `--steps` updates. Token ids are the same on both sides (0-58 the numbers, 59 `+`, 60 `=`,
   61 PAD, 62-73 the variables a-l; checked), so the batch goes to both unchanged; our side
   gets the labels at the last position and IGNORE elsewhere, as `task.train_batch` gives
   them. Our update is `Engine.step` at `lr_at(train_config, step)`: what `study run` runs.

Both loops run twice: in float64 (both networks and AdamW states in double precision, on
the CPU), where the same computation must give the same losses and weights to rounding
(1e-6 relative on the float32 losses, 1e-9 on the weights after the last update); and in the
precision a run uses (float32 on the CPU), where rounding differences grow as training goes
in any loop, so each step's losses must agree within max(`--rtol`, 4 x the float32 noise): how
far the authors' own loop in float32 has strayed from itself in float64 up to that step.
Exit status 0 when every setting is `same` or `kept`, the data statistics agree and both runs
pass; 1 otherwise.

    PYTHONPATH=.:/tmp/tlens-site OMP_NUM_THREADS=1 python tools/authors_loop/compare_assign_add.py

(TransformerLens < 4, which still has HookedTransformer, importable; see README.md here.)
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import authors_train as A  # noqa: E402
from study.run.config import resolve  # noqa: E402
from study.core import registry  # noqa: E402
from study.core.labels import IGNORE  # noqa: E402
from study.train.engine import Engine  # noqa: E402
from study.train.feed import feed_mask  # noqa: E402
from study.train.runtime import resolve_runtime  # noqa: E402
from study.train.schedule import lr_at  # noqa: E402
from study.train.streams import loss_targets  # noqa: E402


# --- both sides -------------------------------------------------------------------------------
def build_ours(device: str):
    """The `scale=paper` run as `study run task=assign_add model=attn2` builds it."""
    cfg = resolve({"task": "assign_add", "model": "attn2", "scale": "paper",
                   "runtime.device": device})
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    model = registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab), task.seq_len)
    rt = resolve_runtime(cfg.train)
    model.to(rt.device).train()
    engine = Engine(model, cfg.train, rt, task.output_ids, len(task.vocab))
    return cfg, task, model, rt, engine


def our_name(theirs: str) -> str:
    """TransformerLens parameter name -> ours (embed.W_E -> W_E, unembed.W_U -> W_U, blocks
    keep theirs)."""
    return {"embed.W_E": "W_E", "pos_embed.W_pos": "W_pos", "unembed.W_U": "W_U"}.get(theirs, theirs)


def copy_weights(authors_model, our_model) -> list[str]:
    """Copy every trainable authors' weight into ours; returns the names copied. Refuses if a
    frozen authors' weight is not zero (dropping it would change the function) or if one of
    ours has no counterpart."""
    ours = dict(our_model.named_parameters())
    copied = []
    with torch.no_grad():
        for name, p in authors_model.named_parameters():
            if not p.requires_grad:
                if p.abs().max() != 0:
                    raise SystemExit(f"authors' frozen {name} is not zero")
                continue
            mine = ours[our_name(name)]
            if name == "unembed.W_U":  # (d_model, 59) into the number columns of (d_model, 74)
                mine[:, :A.MOD].copy_(p)
            else:
                if mine.shape != p.shape:
                    raise SystemExit(f"{name}: authors' {tuple(p.shape)}, ours {tuple(mine.shape)}")
                mine.copy_(p)
            copied.append(our_name(name))
    left = set(ours) - set(copied)
    if left:
        raise SystemExit(f"our weights without an authors' counterpart: {sorted(left)}")
    return copied


@contextlib.contextmanager
def tf32(on: bool):
    """CUDA's TF32 switch for fp32 matmuls, for one side: ours turns it on
    (`resolve_runtime`), the authors' code leaves torch's default (off)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


# --- 1. settings ------------------------------------------------------------------------------
def settings(a_model, trainer, cfg, task, model, rt, engine) -> list[tuple]:
    """(what, authors, ours, verdict) rows."""
    rows = []
    tc, mc, hc = cfg.train, cfg.model_config, a_model.cfg
    cuda = rt.device.type == "cuda"

    def row(what, theirs, ours, kept=None, same=None):
        same = (theirs == ours) if same is None else same
        rows.append((what, theirs, ours, "same" if same else f"kept: {kept}" if kept else "DIFFERS"))

    row("optimizer", type(trainer.opt).__name__, type(engine.optimizer).__name__)
    for key in ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"):
        theirs, ours = trainer.opt.defaults[key], engine.optimizer.defaults[key]
        row(f"AdamW {key}", tuple(theirs) if key == "betas" else theirs,
            tuple(ours) if key == "betas" else ours)
    row("AdamW fused", bool(trainer.opt.defaults["fused"]), bool(engine.optimizer.defaults["fused"]))
    a_train = sorted(our_name(n) for n, p in a_model.named_parameters() if p.requires_grad)
    o_train = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    row("trained + decayed weights", ", ".join(a_train), ", ".join(o_train))
    lrs = sorted({lr_at(tc, s) for s in range(tc.steps)})
    row("lr over the run", f"constant {A.LR:g} (no scheduler)",
        f"constant {lrs[0]:g}" if len(lrs) == 1 else f"{len(lrs)} values {lrs[0]:g}..{lrs[-1]:g}",
        same=lrs == [A.LR])
    row("warm-up steps", 0, tc.warmup_steps)
    row("gradient clipping", "none", "none" if tc.grad_clip == 0 else f"norm {tc.grad_clip:g}")
    row("batch size", A.BATCH_SIZE, tc.batch_size)
    row("steps", A.RELEASED_STEPS, tc.steps)
    scored = np.unique(np.nonzero(task.train_batch(0, 64).labels != IGNORE)[1])
    row("loss", f"mean CE at position {A.SEQ_LEN - 1} over ids 0..{hc.d_vocab_out - 1}",
        f"mean CE at position {','.join(map(str, scored))} over ids "
        f"{min(task.output_ids)}..{max(task.output_ids)}" if tc.loss_on == "answer" and
        list(task.output_ids) == list(range(len(task.output_ids))) else
        f"loss_on={tc.loss_on}, output_ids={task.output_ids}")
    vocab = [s.replace("<PAD>", "PAD") for s in A.TOKEN_STRINGS[:A.VOCAB]]
    row("token ids", f"{A.VOCAB} tokens", f"{len(task.vocab)} tokens",
        same=vocab == list(task.vocab))
    for a, o in (("n_layers", "n_layers"), ("n_heads", "n_heads"), ("d_model", "d_model"),
                 ("d_head", "d_head"), ("d_mlp", "d_mlp"), ("act_fn", "activation")):
        row(a, getattr(hc, a), getattr(mc, o))
    row("context", hc.n_ctx, model.W_pos.shape[0])
    row("positions", "learned absolute" if hc.positional_embedding_type == "standard"
        else hc.positional_embedding_type, "learned absolute")
    row("attention scale", hc.attn_scale if hc.use_attn_scale else 1.0, mc.d_head ** 0.5)
    row("normalisation", hc.normalization_type,
        None if not any(isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))
                        for m in model.modules()) else "LayerNorm")
    a_bias = [n for n, _ in a_model.named_parameters() if ".b_" in n]
    row("biases", "zero, frozen" if all(not p.requires_grad and not p.any() for n, p in
                                       a_model.named_parameters() if ".b_" in n) else a_bias,
        "none", same=not any(".b_" in n or n.endswith("bias") for n, _ in model.named_parameters()))
    row("MLP in layer 0", "zeroed, frozen" if A.REMOVE_LAYER_0_MLP else "yes",
        "yes" if 0 in mc.mlp_layers() else "absent", same=(0 not in mc.mlp_layers()) == A.REMOVE_LAYER_0_MLP)
    row("init std of every weight", round(hc.initializer_range, 6),
        round(mc.init_scale / math.sqrt(mc.d_model), 6))
    row("init tensors at seed 42", "TransformerLens' draw order", "ours",
        kept="same distribution, another draw order: the comparison copies the authors' tensors",
        same=False)
    row("unembedding width", hc.d_vocab_out, model.W_U.shape[1],
        kept="ours covers every token; the loss and accuracy read the 59 numbers only, the "
        "other 15 columns get no gradient (checked below)")
    n_a = sum(p.numel() for p in a_model.parameters() if p.requires_grad)
    n_o = sum(p.numel() for p in model.parameters() if p.requires_grad)
    extra = (model.W_U.shape[1] - hc.d_vocab_out) * model.W_U.shape[0]
    row("trained parameters", n_a, f"{n_o} = {n_o - extra} + {extra} (the extra W_U columns)",
        same=n_o - extra == n_a)
    row("precision", "bf16 autocast + GradScaler" if trainer.amp_enabled else "fp32",
        f"{rt.precision} autocast" if rt.amp_dtype is not None else "fp32",
        kept="no GradScaler: a power-of-two loss scale is exact in fp32, and bf16 needs none",
        same=not cuda)
    row("torch.compile", False, rt.compiled, kept="the same computation in fused kernels")
    row("TF32 outside autocast", False, cuda, kept="ours allows it on CUDA; the matmuls "
        "run in bf16 under autocast")
    row("training data", "uniform over (variable, form, pair) rows; Python random; worker "
        "seeds from process ids", "the same distribution; numpy; batch i a function of "
        "(task.seed, i)", kept="by design (resumable, reproducible); the comparison feeds "
        "the authors' batches to both; the distributions are compared below", same=False)
    return rows


# --- 2. data ----------------------------------------------------------------------------------
def features(ids: np.ndarray, task) -> dict[str, np.ndarray]:
    """Per-sequence categorical statistics of (n, 16) token ids (same ids on both sides)."""
    var0 = A.A_TOKEN
    lhs, rhs = ids[:, -3], ids[:, -2]
    form = (lhs >= var0).astype(int) + 2 * (rhs >= var0)  # 0 nn, 1 vn, 2 nv, 3 vv
    prefix = ids[:, :-4]
    n_assign = (prefix >= var0).sum(1)
    lead = np.argmax(prefix != A.PAD, axis=1)
    trail = np.argmax(prefix[:, ::-1] != A.PAD, axis=1)
    x, y = task.operands(ids)
    vals = prefix[:, 1:][prefix[:, :-1] >= var0]
    first_var = prefix[np.arange(len(ids)), lead]
    # joint: where each operand variable is assigned (tokens before `+`, assignments after
    # it), per form and side; -1 where that side is a number
    rows = np.arange(len(ids))
    is_var = prefix >= var0
    later = np.cumsum(is_var[:, ::-1], axis=1)[:, ::-1] - is_var  # assignments after each slot
    joint = {}
    for side, tok in (("left", lhs), ("right", rhs)):
        at = np.argmax(prefix == tok[:, None], axis=1)
        there = (tok >= var0) & (prefix[rows, at] == tok)
        joint[f"form x tokens from the {side} operand's assignment to +"] = \
            form * 100 + np.where(there, prefix.shape[1] - at, -1)
        joint[f"form x assignments after the {side} operand's"] = \
            form * 100 + np.where(there, later[rows, at], -1)
    return {"form": form, "form x n_assign": form * 10 + n_assign, **joint,
            "PADs before the first assignment": lead, "PADs before +": trail,
            "left operand variable (v n, v v)": lhs[lhs >= var0],
            "right operand variable (n v, v v)": rhs[rhs >= var0],
            "first assigned variable": first_var,
            "operand x": x, "operand y": y, "answer": (x + y) % A.MOD,
            "assigned values (all)": vals}


def hard_checks(ids: np.ndarray, task) -> dict[str, int]:
    """Counts that must be 0 in training data."""
    x, y = task.operands(ids)
    lhs, rhs = ids[:, -3], ids[:, -2]
    prefix = ids[:, :-4]
    dup = sum(int(np.bincount(r[r >= A.A_TOKEN] - A.A_TOKEN, minlength=A.VAR_LEN).max() > 1)
              for r in prefix)
    unassigned = int(((lhs >= A.A_TOKEN) & (x < 0)).sum() + ((rhs >= A.A_TOKEN) & (y < 0)).sum())
    return {"held-out pairs": int(task.held[np.maximum(x, 0), np.maximum(y, 0)].sum()),
            "restricted positions": int(np.isin(lhs, A.RIGHT_RESTRICT_VARS).sum() +
                                        np.isin(rhs, A.LEFT_RESTRICT_VARS).sum()),
            "variable assigned twice": dup, "operand unassigned": unassigned}


def homogeneity_p(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square test that two samples of a categorical variable share one distribution."""
    from scipy.stats import chi2_contingency
    cats = np.union1d(a, b)
    counts = np.stack([np.bincount(np.searchsorted(cats, s), minlength=len(cats)) for s in (a, b)])
    if counts.shape[1] < 2:
        return 1.0
    return float(chi2_contingency(counts).pvalue)


def compare_data(task, n: int, build) -> tuple[list[tuple], dict, dict, bool]:
    """Statistics of n authors' sequences against n of ours; -> (rows (what, TV distance,
    p-value, verdict), authors' hard checks, ours, ok)."""
    batches = A.Batches(A.make_split(), seed=A.SEED + 1000, worker=1, build=build)
    chunks = [batches.next(min(4096, n - k))[0] for k in range(0, n, 4096)]
    theirs = np.concatenate(chunks)
    ours = np.concatenate([task.train_batch(10**6 + k, min(4096, n - k * 4096)).ids
                           for k in range(-(-n // 4096))]).astype(np.int64)
    fa, fo = features(theirs, task), features(ours, task)
    rows, ok = [], True
    n_tests = len(fa)
    for key in fa:
        p = homogeneity_p(fa[key], fo[key])
        cats = np.union1d(fa[key], fo[key])
        pa = np.bincount(np.searchsorted(cats, fa[key]), minlength=len(cats)) / len(fa[key])
        po = np.bincount(np.searchsorted(cats, fo[key]), minlength=len(cats)) / len(fo[key])
        fine = p * n_tests > 1e-3  # Bonferroni over the statistics
        ok &= fine
        rows.append((key, 0.5 * float(np.abs(pa - po).sum()), p, "same" if fine else "DIFFERS"))
    ha, ho = hard_checks(theirs, task), hard_checks(ours, task)
    ok &= not any(ha.values()) and not any(ho.values())
    return rows, ha, ho, bool(ok)


# --- 3. training ------------------------------------------------------------------------------
def lockstep(batches: list, device: str, float64: bool) -> dict:
    """Both loops from the authors' initial weights over `batches` [(B, 16) ids, (B,) labels].
    float64: both networks (and so AdamW's states) in double precision, on the CPU; the loss
    is still taken on float32 logits, as both loops cast them (`.float()`)."""
    torch.manual_seed(0)  # our weights before the copy (the extra W_U columns keep theirs)
    cfg, task, model, rt, _ = build_ours("cpu" if float64 else device)
    a_model = A.build_model(rt.device)
    copy_weights(a_model, model)
    if float64:
        a_model.double()
        model.double()
    trainer = A.Trainer(a_model, rt.device)
    engine = Engine(model, cfg.train, rt, task.output_ids, len(task.vocab))
    extra0 = model.W_U[:, A.MOD:].detach().clone()
    cuda = rt.device.type == "cuda"
    losses = []
    for step, (toks, labs) in enumerate(batches):
        src = torch.from_numpy(toks).to(rt.device)  # (B, 16): the same ids on both sides
        tgt = torch.from_numpy(labs).to(rt.device)  # (B,)
        labels = torch.full_like(src, IGNORE)
        labels[:, -1] = tgt  # (B, 16), as task.train_batch labels a sequence
        with tf32(False):
            loss_a = trainer.step(src, tgt)
        with tf32(cuda):
            loss_o, _ = engine.step(src, loss_targets(src, labels, cfg.train.loss_on, task.pad_id),
                                    feed_mask(labels), lr_at(cfg.train, step))
        losses.append((float(loss_a), float(loss_o)))
    ours = dict(model.named_parameters())
    weights = {}
    for name, p in a_model.named_parameters():
        if p.requires_grad:
            mine = ours[our_name(name)].detach()
            mine = mine[:, :A.MOD] if name == "unembed.W_U" else mine
            weights[our_name(name)] = float((mine.double() - p.detach().double()).abs().max())
    # the non-number columns: weight decay only, (1 - lr * wd) per update
    decay = (1 - cfg.train.lr * cfg.train.weight_decay) ** len(batches)
    extra = float((model.W_U[:, A.MOD:].detach().double() - extra0.double() * decay).abs().max())
    rows = None if float64 else settings(a_model, trainer, cfg, task, model, rt, engine)
    return {"losses": np.array(losses), "weights": weights, "extra": extra, "settings": rows,
            "task": task, "runtime": rt}


def rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-12)


def compare(steps: int = 100, device: str = "cpu", rtol: float = 1e-5, data_samples: int = 16384,
            authors_train: str | None = None, show_every: int = 10, out=print) -> dict:
    """Run the three comparisons, print them through `out`, return the numbers and `ok`.

    Pass criteria. float64 (the same computation?): every step's losses within 1e-6
    relative (they are float32 numbers of float64 logits) and every weight within 1e-9 after
    the last update. float32 (what a CPU run computes): every step's losses within
    max(rtol, 4 x the float32 noise), the noise being how far the authors' own loop in float32
    strays from itself in float64 (largest relative loss gap up to that step): rounding
    differences grow as training goes, in either loop."""
    build = A.load_build_sequence(Path(authors_train)) if authors_train else A.build_sequence
    t0 = time.perf_counter()
    sampler = A.Batches(A.make_split(), build=build)
    batches = [sampler.next(A.BATCH_SIZE) for _ in range(steps)]
    native = lockstep(batches, device, float64=False)
    f64 = lockstep(batches, device, float64=True)
    t_train = time.perf_counter() - t0
    task, rt, srows = native["task"], native["runtime"], native["settings"]

    out(f"== settings: the authors' train.py against scale=paper (device {rt.device_name}) ==")
    w = max(len(r[0]) for r in srows)
    for what, theirs, ours, verdict in srows:
        out(f"{what:<{w}}  authors: {theirs}\n{'':<{w}}  ours:    {ours}\n{'':<{w}}  -> {verdict}")
    settings_ok = all(not r[3].startswith("DIFFERS") for r in srows)

    data_ok, drows = True, []
    if data_samples:
        drows, ha, ho, data_ok = compare_data(task, data_samples, build)
        out(f"\n== training data: {data_samples} sequences from each sampler ==")
        for key, tv, p, verdict in drows:
            out(f"{key:<36} TV {tv:.4f}  chi2 p {p:.3g}  {verdict}")
        out(f"must be 0: authors {ha}\n           ours    {ho}")

    how = "built by their own train.py" if authors_train else "the transcribed sampler"
    out(f"\n== {steps} updates on the same batches (the authors' batches, {how}) ==")
    a32, o32 = native["losses"].T
    a64, o64 = f64["losses"].T
    r32, r64 = rel(o32, a32), rel(o64, a64)
    noise = np.maximum.accumulate(rel(a32, a64))  # the authors' loop: float32 against float64
    allowed = np.maximum(rtol, 4 * noise)
    prec = "fp32" if rt.amp_dtype is None else rt.precision
    out(f"{'step':>4} {'authors ' + prec:>12} {'ours ' + prec:>12} {'rel diff':>9} {'allowed':>9}"
        f" | {'authors fp64':>12} {'ours fp64':>12} {'rel diff':>9}")
    for step in range(steps):
        if step < 3 or step % show_every == 0 or step == steps - 1:
            out(f"{step:>4} {a32[step]:>12.8f} {o32[step]:>12.8f} {r32[step]:>9.2e} "
                f"{allowed[step]:>9.2e} | {a64[step]:>12.8f} {o64[step]:>12.8f} {r64[step]:>9.2e}")
    ok64 = bool(r64.max() <= 1e-6) and max(f64["weights"].values()) <= 1e-9
    ok32 = bool((r32 <= allowed).all())
    out(f"float64: max abs loss diff {np.abs(o64 - a64).max():.2e}, max rel {r64.max():.2e}; "
        f"weights after update {steps}: max abs diff {max(f64['weights'].values()):.1e} "
        f"-> {'same' if ok64 else 'DIFFERS'}")
    out(f"{prec}: max abs loss diff {np.abs(o32 - a32).max():.2e}, max rel {r32.max():.2e} "
        f"(the authors' own {prec} against fp64: up to {noise[-1]:.2e}); weights after update "
        f"{steps}: max abs diff {max(native['weights'].values()):.1e} "
        f"-> {'within float noise' if ok32 else 'DIFFERS'}")
    extra_ok = max(native["extra"], f64["extra"]) <= 1e-6
    out(f"our 15 non-number W_U columns only decay (max deviation {native['extra']:.1e}): "
        f"{'yes' if extra_ok else 'NO'}")
    ok = settings_ok and data_ok and ok64 and ok32 and extra_ok
    out(f"\n{'OK' if ok else 'FAILED'}: settings {'ok' if settings_ok else 'differ'}, data "
        f"{'ok' if data_ok else 'differ'}, float64 {'same' if ok64 else 'differs'}, {prec} "
        f"{'ok' if ok32 else 'differs'} ({time.perf_counter() - t0:.0f} s, training "
        f"{t_train:.0f} s)")
    return {"ok": ok, "settings_ok": settings_ok, "data_ok": data_ok, "float64_ok": ok64,
            "float32_ok": ok32, "extra_columns_ok": extra_ok, "losses": native["losses"],
            "losses64": f64["losses"], "max_abs": float(np.abs(o32 - a32).max()),
            "max_rel": float(r32.max()), "max_rel64": float(r64.max()), "noise": float(noise[-1]),
            "weights64": f64["weights"], "weights": native["weights"], "settings": srows,
            "data": drows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="updates to compare (default 100)")
    ap.add_argument("--device", default="cpu", help="cpu (fp32, default) or cuda (both sides "
                    "on their CUDA paths: bf16 autocast; raise --rtol)")
    ap.add_argument("--rtol", type=float, default=1e-5, help="largest relative loss difference")
    ap.add_argument("--data-samples", type=int, default=16384,
                    help="sequences per sampler for the data comparison (0: skip it)")
    ap.add_argument("--authors-train", default=None, metavar="TRAIN_PY",
                    help="the authors' train.py: use its own build_sequence for the batches")
    ap.add_argument("--every", type=int, default=10, help="print every this many steps")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.data_samples < 0 or a.rtol <= 0 or a.every < 1:
        ap.error("--steps and --every must be >= 1, --data-samples >= 0, --rtol > 0")
    return 0 if compare(a.steps, a.device, a.rtol, a.data_samples, a.authors_train, a.every)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
