"""The training loop: one loop for every model family and every task.

`train(run, task, model_entry, model_cfg, train_cfg, seed)` builds the network, trains it
with AdamW on the task's training data, evaluates every split of `task.eval_splits` per
stratum at log-spaced checkpoints, and leaves in the run directory `metrics.parquet` (long
format: step, split, stratum, metric, value), `checkpoints/` and `summary.json`.

Speed [ours]: the whole (tokenised) training split lives on the device and batches are
indices into it, trimmed to the split's used length (`study/train/streams.py`). On CUDA: bf16
autocast, fused AdamW, `torch.compile` of forward + loss (`engine.py`), losses accumulated on
the device and read back only at log intervals (`meter.py`).

Resume: re-running on the same run directory continues from the newest checkpoint holding a
training state (`state.py`). Batch i is a pure function of (seed, i) (`streams.py`) and the
state holds the optimiser, the torch RNG (dropout) and the pending loss sums, so on CPU a
resumed run ends with bit-equal weights and equal metrics. Ctrl-C (and SIGTERM, SIGUSR1,
SIGUSR2) is deferred to the end of the current step, which then writes a resume point
(`interrupt.py`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from study.core.rundir import RunDir
from study.train import checkpoint as ckpt
from study.train.clock import Clock
from study.train.config import TrainConfig
from study.train.engine import Engine
from study.train.evaluate import Evaluator, latest_overall, overall, reached
from study.train.interrupt import DeferInterrupt
from study.train.meter import LossMeter
from study.train.metrics import read_metrics
from study.train.progress import Progress
from study.train.resume import resume_from, run_meta
from study.train.runtime import resolve_runtime
from study.train.schedule import Cadence, lr_at
from study.train.state import TrainState
from study.train.streams import make_stream
from study.train.summary import run_info, write_summary

_logger = logging.getLogger(__name__)


def train(run, task, model_entry, model_cfg, train_cfg: TrainConfig, seed: int, *,
          callback: Callable[[int], None] | None = None) -> dict:
    """Train (or resume) one run; returns the summary also written to summary.json.
    `callback(step)` runs after every completed step (raising KeyboardInterrupt from it
    behaves like Ctrl-C)."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    rt = resolve_runtime(train_cfg)
    meta = run_meta(task, model_entry, model_cfg, train_cfg, seed)
    resume_dir, state = resume_from(run, meta)
    torch.manual_seed(seed)  # the initial weights; a resumed run then restores its saved RNG
    model = model_entry.obj(model_cfg, len(task.vocab), task.seq_len)
    info = run_info(task, model_entry, seed, train_cfg, model, rt)
    if state.finished:  # trained already: only summarise again
        return write_summary(run, read_metrics(run, state.step), state, info)

    if resume_dir is not None:
        ckpt.load_weights(model, resume_dir)
    start = f"resuming from step {state.step} ({resume_dir.name})" if resume_dir else "training from step 0"
    extras = "".join(s for s, on in ((", compiled", rt.compiled), (", CUDA graphs", rt.cuda_graphs),
                                      (", fused AdamW", rt.fused)) if on)
    _say(f"{start} to {train_cfg.steps} on {rt.device_name}, {rt.precision}{extras}")
    model.to(rt.device).train()
    engine = Engine(model, train_cfg, rt, task.output_ids, len(task.vocab))
    if resume_dir is not None:
        state.restore(run, engine)
    s = _Session(run, train_cfg, meta, engine, make_stream(task, train_cfg, seed, rt.device),
                 Evaluator(task, train_cfg, rt, engine.outputs), LossMeter(rt.device, state.meter),
                 Cadence.of(train_cfg), state, saved=state.step)
    if resume_dir is None:  # step 0: the untrained network, evaluated and saved
        state.rows += s.evaluator(model, 0)
        s.save(resume=False)
    s.start(task.name, model_entry.name)
    _run_steps(s, callback)
    return write_summary(run, state.rows, state, {**info, "compiled": engine.compiled,
                                                  "cuda_graphs": engine.graphs})


def _say(line: str) -> None:
    _logger.info(line)


@dataclass
class _Session:
    """What one call of `train` works with: the parts built once, the state they advance, and
    the bookkeeping that is not saved."""
    run: RunDir
    cfg: TrainConfig
    meta: dict  # every checkpoint's meta.json
    engine: Engine
    stream: object  # ShuffledStream | OnTheFlyStream: (B, L) ids and targets of batch i
    evaluator: Evaluator
    meter: LossMeter
    cadence: Cadence
    state: TrainState
    saved: int  # step of the newest state on disk
    clock: Clock | None = None
    bar: Progress | None = None
    mid_step: bool = False  # an update ran whose bookkeeping is not complete: nothing to save

    def start(self, task: str, model: str) -> None:
        """Start the clocks (the step-0 evaluation is not run time) and the progress bar."""
        self.state.accuracy = latest_overall(self.state.rows)
        self.bar = Progress(self.cfg.steps, self.state.step, task, model, self.cfg.progress_seconds)
        self.clock = Clock(self.state.wall_time_s)

    def save(self, resume: bool) -> None:
        self.state.save(self.run, self.engine, self.meter, self.meta, resume=resume,
                        keep_state=self.cfg.keep_state)
        self.saved = self.state.step

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.stream.close()


def _run_steps(s: _Session, callback: Callable[[int], None] | None) -> None:
    """Train until the run finishes. On a stop signal (taking effect between steps) or a
    KeyboardInterrupt from `callback`, save a resume point, then re-raise."""
    try:
        with DeferInterrupt() as interrupt:
            for step in range(s.state.step + 1, s.cfg.steps + 1):
                _train_step(s, step)
                if callback is not None:
                    callback(step)
                interrupt.check()
                if s.state.finished:
                    break
    except KeyboardInterrupt:
        # an interruption inside a step leaves nothing consistent to save (a second signal)
        if not s.mid_step and s.state.step > s.saved:
            _checkpoint(s, resume=True)
        raise
    finally:
        s.close()


def _train_step(s: _Session, step: int) -> None:
    """Update `step` (1-based) and what falls due after it: log row, evaluation, checkpoint."""
    cfg, state = s.cfg, s.state
    s.mid_step = True
    lr = lr_at(cfg, step - 1)
    s.meter.add(*s.engine.step(*s.stream.batch(step - 1), lr))
    state.step, state.steps_timed = step, state.steps_timed + 1
    state.tokens_timed += s.stream.tokens_per_batch
    checkpoint = s.cadence.is_checkpoint(step)
    if step < cfg.steps and s.clock.over_budget(cfg.max_minutes):
        # the time budget ends training like a target would: evaluated and checkpointed
        state.stopped_early = state.time_limited = checkpoint = True
    evaluate = checkpoint or s.cadence.is_eval(step)
    if evaluate or s.cadence.is_log(step):
        _log(s, lr)
    if evaluate:
        reached_target = _evaluate(s)
        s.bar.evaluated(state.accuracy, state.step)  # the progress line shows this evaluation
        checkpoint = checkpoint or reached_target
    if checkpoint or step == cfg.steps:
        state.finished = state.stopped_early or step == cfg.steps
        _checkpoint(s, resume=False)
    elif s.clock.save_due(cfg.resume_minutes):
        _checkpoint(s, resume=True)
    if evaluate or s.saved == step:
        s.clock.restart_lap()  # evaluating and saving are not training time
    s.mid_step = False


def _log(s: _Session, lr: float) -> None:
    """A training-loss row, the training time up to here, and the progress bar."""
    state = s.state
    logged = s.meter.flush(state.step, lr, clip=s.cfg.grad_clip > 0)
    state.rows += logged
    s.engine.runtime.sync()  # the clock must count the queued device work
    state.train_time_s += s.clock.lap()
    s.bar.show(state.step, loss=logged[0][4], acc=state.accuracy,
               tokens_per_s=state.tokens_timed / max(state.train_time_s, 1e-9))


def _evaluate(s: _Session) -> bool:
    """Evaluate every split; True when the target accuracy is reached (training stops)."""
    state = s.state
    state.rows += s.evaluator(s.engine.model, state.step)
    state.accuracy = overall(state.rows, state.step)
    if not reached(state.accuracy, s.cfg.target_accuracy):
        return False
    state.stopped_early = state.step < s.cfg.steps
    return True


def _checkpoint(s: _Session, resume: bool) -> None:
    """Save the state with the wall time so far; the next resume point falls due from now."""
    s.state.wall_time_s = s.clock.wall()
    s.save(resume)
    s.clock.saved()
