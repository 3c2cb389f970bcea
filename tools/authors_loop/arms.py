"""When does assign-and-add route? The authors' loop and ours, one ingredient swapped at a time.

Exoo et al.'s released run (bexoo/assign-and-add) routes its variable pools near step 5,400
and its restricted pools near 15,000; `study run task=assign_add model=attn2 scale=paper`
routes earlier. Our update equals theirs from the same weights and batches
(`compare_assign_add.py`), so what can differ is where a run starts and what it is fed. Each
arm trains `scale=paper` (batch 512, AdamW 1e-3, float32 on the CPU) from step 0 and scores
the nine pools every `--every` updates with the evaluator a `scale=paper` run uses
(`score_checkpoints.build`):

- `authors`: their HookedTransformer (TransformerLens' initialisation, seed 42), their batch
  stream (`authors_train.Batches`: rows of their fixed table, uniform) and their loop body;
- `ours`: our network at `--seed` (as `study run seed=N` builds it), our batches
  (`task.train_batch`) and `Engine.step`, as `study run` trains;
- `their-batches`: ours, fed the authors' batch stream;
- `their-init`: ours, started from the authors' initial weights.

Each arm writes `ARM.csv` (step, the nine pools' accuracies) to `--out` and prints the first
step at which each pool reaches 50 % and 95 %. One arm a process, so two run side by side on
two cores:

    PYTHONPATH=.:/tmp/tlens-site OMP_NUM_THREADS=1 \\
        python tools/authors_loop/arms.py authors --steps 6000 --out /tmp/arms

About 0.3 s an update on one CPU thread.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import authors_train as A  # noqa: E402
from compare_assign_add import build_ours, copy_weights  # noqa: E402
from score_checkpoints import build as build_scorer, load_into  # noqa: E402
from study.core.labels import IGNORE  # noqa: E402
from study.tasks.assign_add.generate import NINE_POOLS  # noqa: E402
from study.train.feed import feed_mask  # noqa: E402
from study.train.schedule import lr_at  # noqa: E402
from study.train.streams import loss_targets  # noqa: E402

ARMS = ("authors", "ours", "their-batches", "their-init")


class TheirStream:
    """The authors' batch stream as (ids, labels) numpy arrays of our task's layout."""

    def __init__(self, worker: int = 0):
        self.batches = A.Batches(A.make_split(), worker=worker)

    def __call__(self, step: int, batch: int):
        toks, labs = self.batches.next(batch)
        labels = np.full_like(toks, IGNORE)
        labels[:, -1] = labs  # (B, 16): labels at the last position, as task.train_batch
        return toks, labels


class OurStream:
    """Our batches: `task.train_batch(offset + step)` (an offset gives another stream of the
    same distribution, with the same held-out pairs)."""

    def __init__(self, task, offset: int = 0):
        self.task, self.offset = task, offset

    def __call__(self, step: int, batch: int):
        ex = self.task.train_batch(self.offset + step, batch)
        return ex.ids, ex.labels


def authors_arm(worker: int):
    """-> (step(i), model to score): their model, batches and loop body."""
    model = A.build_model(torch.device("cpu"))
    trainer = A.Trainer(model, torch.device("cpu"))
    batches = A.Batches(A.make_split(), worker=worker)

    def step(i: int) -> float:
        toks, labs = batches.next(A.BATCH_SIZE)
        return float(trainer.step(torch.from_numpy(toks), torch.from_numpy(labs)))
    return step, model


def our_arm(arm: str, seed: int, offset: int, worker: int):
    torch.manual_seed(seed)  # the initial weights, as study.train.loop.train draws them
    cfg, task, model, rt, engine = build_ours("cpu")
    if arm == "their-init":
        copy_weights(A.build_model(rt.device), model)  # in place: the engine's parameters
    stream = TheirStream(worker) if arm == "their-batches" else OurStream(task, offset)
    batch = cfg.train.batch_size

    def step(i: int) -> float:
        ids, labels = (torch.from_numpy(np.asarray(a, dtype=np.int64)) for a in stream(i, batch))
        loss, _ = engine.step(ids, loss_targets(ids, labels, cfg.train.loss_on, task.pad_id),
                              feed_mask(labels), lr_at(cfg.train, i))
        return float(loss)
    return step, model


def firsts(rows: list[list[float]], pools: list[str], level: float) -> dict[str, int | None]:
    out = {}
    for j, pool in enumerate(pools):
        out[pool] = next((int(r[0]) for r in rows if r[j + 1] >= level), None)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arm", choices=ARMS)
    ap.add_argument("--steps", type=int, default=6000, help="updates (default 6,000)")
    ap.add_argument("--every", type=int, default=250, help="score the pools every N updates")
    ap.add_argument("--examples", type=int, default=1000, help="examples of each pool")
    ap.add_argument("--seed", type=int, default=0, help="our initial weights' seed")
    ap.add_argument("--offset", type=int, default=0,
                    help="our batches from train_batch(offset + step): another stream")
    ap.add_argument("--worker", type=int, default=0, help="the authors' prefetch worker id")
    ap.add_argument("--name", default=None, help="the CSV's name (default: the arm's)")
    ap.add_argument("--out", type=Path, default=Path("arms"))
    args = ap.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        raise SystemExit("--steps and --every must be positive")
    step, model = (authors_arm(args.worker) if args.arm == "authors" else
                   our_arm(args.arm, args.seed, args.offset, args.worker))
    _, scorer_model, evaluate = build_scorer(args.examples)
    pools = list(NINE_POOLS)

    def score(at: int) -> list[float]:
        if args.arm == "authors":
            load_into(scorer_model, model.state_dict())
            target = scorer_model
        else:
            target = model
        acc = {split: value for _, split, stratum, metric, value in evaluate(target, at)
               if stratum == "all" and metric == "accuracy"}
        model.train()
        return [float(at)] + [acc[p] for p in pools]

    args.out.mkdir(parents=True, exist_ok=True)
    name = args.name or args.arm
    path = args.out / f"{name}.csv"
    rows, t0 = [score(0)], time.time()
    for i in range(args.steps):
        loss = step(i)
        if (i + 1) % args.every == 0 or i + 1 == args.steps:
            rows.append(score(i + 1))
            path.write_text("step," + ",".join(pools) + "\n" +
                            "\n".join(",".join(f"{v:g}" for v in r) for r in rows) + "\n")
            print(f"{name} step {i + 1} loss {loss:.3f} ({time.time() - t0:.0f} s): " +
                  " ".join(f"{v:.2f}" for v in rows[-1][1:]), flush=True)
    for level in (0.5, 0.95):
        print(f"{name}: first step at {level:.0%}: {firsts(rows, pools, level)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
