"""Score the authors' released assign-and-add checkpoints on this project's nine pools.

Exoo et al. 2026 released the checkpoints of their run (bexoo/assign-and-add, `checkpoints/`:
`checkpoint_step_N.pth` for N = 1, 101, ..., 39,901, the TransformerLens state dict of the
2-layer, 1-head model; commit d60c064). Each is loaded into our `attn2` network at
`scale=paper` (the same TransformerLens names and shapes; their unembedding's 59 number
columns go into ours, whose other columns are outside the task's output vocabulary and
never score) and evaluated exactly as a `scale=paper` run evaluates itself during training:
`study.train.evaluate.Evaluator`, 2,000 examples of each pool (`--examples`), accuracy over
the task's 59 number logits. The result is the reference table the runs of `assign_add` draw their own
pools against (`study/tasks/assign_add/reference/exoo2026_released_run.csv`).

    git clone https://github.com/bexoo/assign-and-add /tmp/assign-and-add
    OMP_NUM_THREADS=1 python tools/authors_loop/score_checkpoints.py \\
        /tmp/assign-and-add/checkpoints study/tasks/assign_add/reference/exoo2026_released_run.csv

About 6 s a checkpoint on one CPU thread at 2,000 examples a pool, 40 minutes for the 400
(`--threads 2` nearly halves it). No TransformerLens is needed: the
checkpoints are plain state dicts.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from study.run.config import resolve  # noqa: E402
from study.core import registry  # noqa: E402
from study.tasks.assign_add.generate import NINE_POOLS  # noqa: E402
from study.train.evaluate import Evaluator  # noqa: E402
from study.core.outputs import Outputs  # noqa: E402
from study.train.runtime import resolve_runtime  # noqa: E402

SOURCE = ("Exoo et al. 2026, released run (github.com/bexoo/assign-and-add, checkpoints/ at "
          "commit d60c064), scored on this project's nine pools at scale=paper "
          "(tools/authors_loop/score_checkpoints.py)")
STEP = re.compile(r"checkpoint_step_(\d+)\.pth$")
# TransformerLens names -> ours; blocks keep theirs
RENAME = {"embed.W_E": "W_E", "pos_embed.W_pos": "W_pos", "unembed.W_U": "W_U"}
# buffers of theirs that are not weights
BUFFERS = re.compile(r"\.(mask|IGNORE)$")


class PoolsOnly:
    """The task with only the nine pools as evaluation splits (not `val`, nor `test`, which
    stacks the same pools)."""

    def __init__(self, task):
        self._task, self.eval_splits = task, tuple(NINE_POOLS)

    def __getattr__(self, name):
        return getattr(self._task, name)


def build(examples: int):
    """(task, model, evaluator) of a `scale=paper` run of assign_add × attn2 on the CPU,
    scoring `examples` of each pool (evenly spaced, as `train.eval_examples` takes them)."""
    cfg = resolve({"task": "assign_add", "model": "attn2", "scale": "paper", "runtime.device": "cpu",
                   "train.eval_examples": str(examples)})
    task = registry.get("task", cfg.task).obj(cfg.task_config)
    model = registry.get("model", cfg.model).obj(cfg.model_config, len(task.vocab), task.seq_len)
    rt = resolve_runtime(cfg.train)
    outputs = Outputs.of(task.output_ids, len(task.vocab), rt.device)
    return task, model.eval(), Evaluator(PoolsOnly(task), cfg.train, rt, outputs)


def load_into(model, state: dict) -> None:
    """The authors' weights into ours. Their biases and their layer-0 MLP are frozen at zero in
    training (ours has neither); a non-zero one is refused, since dropping it would change the
    function."""
    ours = dict(model.named_parameters())
    seen = set()
    with torch.no_grad():
        for name, value in state.items():
            if BUFFERS.search(name):
                continue
            mine = RENAME.get(name, name)
            if mine not in ours:
                if value.abs().max() != 0:
                    raise SystemExit(f"{name}: non-zero in the checkpoint and absent from ours")
                continue
            target = ours[mine]
            if name == "unembed.W_U":  # (d_model, 59) into the number columns of ours
                target[:, :value.shape[1]].copy_(value)
            elif target.shape != value.shape:
                raise SystemExit(f"{name}: theirs {tuple(value.shape)}, ours {tuple(target.shape)}")
            else:
                target.copy_(value)
            seen.add(mine)
    missing = set(ours) - seen
    if missing:
        raise SystemExit(f"ours without a counterpart in the checkpoint: {sorted(missing)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoints", type=Path, help="the authors' checkpoints/ folder")
    ap.add_argument("out", type=Path, help="the CSV to write")
    ap.add_argument("--examples", type=int, default=2000,
                    help="examples of each pool (default 2,000: all of them, as a paper run scores)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads")
    args = ap.parse_args(argv)
    files = sorted((int(m.group(1)), p) for p in args.checkpoints.glob("checkpoint_step_*.pth")
                   if (m := STEP.search(p.name)))
    if not files:
        raise SystemExit(f"{args.checkpoints}: no checkpoint_step_N.pth files")
    torch.set_num_threads(args.threads)
    task, model, evaluate = build(args.examples)
    pools = list(NINE_POOLS)
    lines = [f"# {SOURCE}",
             f"# accuracy of each pool ({args.examples:,} examples) after `step` updates",
             "step," + ",".join(pools)]
    for i, (step, path) in enumerate(files):
        load_into(model, torch.load(path, map_location="cpu", weights_only=True))
        acc = {split: value for _, split, stratum, metric, value in evaluate(model, step)
               if stratum == "all" and metric == "accuracy"}
        lines.append(f"{step}," + ",".join(f"{acc[p]:.4f}" for p in pools))
        if i % 25 == 0:
            print(f"{i + 1}/{len(files)}: step {step}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(args.out)
    print(f"wrote {args.out} ({len(files)} checkpoints)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
