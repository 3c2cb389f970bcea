"""Several seeds of one family as one batched network (stacked weights, `torch.func.vmap`)
against the same networks trained one by one, a step each (forward, backward, Adam), on
counting's batch at scale=small (docs/performance.md):

    PYTHONPATH=. python tools/stacked_seeds.py MODEL N THREADS     # e.g. gru 4 1
"""
import sys, time, copy
import torch
from torch.func import stack_module_state, functional_call, vmap, grad_and_value
from study.run.config import resolve
from study.run.build import build_task
from study.core import registry
import torch.nn.functional as F

model_name = sys.argv[1]; N = int(sys.argv[2]); threads = int(sys.argv[3])
torch.set_num_threads(threads)
cfg = resolve({"task": "counting", "model": model_name, "scale": "small"})
task = build_task(cfg)
B = cfg.train.batch_size
tr = task.split("train")
ids = torch.as_tensor(tr.ids[:B]).long(); labels = torch.as_tensor(tr.labels[:B]).long()
mk = lambda s: (torch.manual_seed(s), registry.get("model", model_name).obj(cfg.model_config, len(task.vocab), task.seq_len))[1]
models = [mk(s) for s in range(N)]
tgt = labels.clone(); tgt[tgt < 0] = -100
def loss_of(logits): return F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=-100)
# one by one
opts = [torch.optim.Adam(m.parameters(), 1e-3) for m in models]
def one_by_one():
    for m, o in zip(models, opts):
        o.zero_grad(); loss_of(m(ids)).backward(); o.step()
# stacked
params, buffers = stack_module_state(models)
base = copy.deepcopy(models[0]).to("meta")
def f(p, b, x): return loss_of(functional_call(base, (p, b), (x,)))
g = vmap(grad_and_value(f), in_dims=(0, 0, None), randomness="different")
sp = {k: v.detach().requires_grad_(False) for k, v in params.items()}
opt = torch.optim.Adam(list(sp.values()), 1e-3)
def stacked():
    grads, _ = g(sp, buffers, ids)
    for k, v in sp.items(): v.grad = grads[k]
    opt.step()
for name, fn in (("one by one", one_by_one), ("stacked", stacked)):
    try:
        fn(); t = time.perf_counter(); n = 0
        while time.perf_counter() - t < 6: fn(); n += 1
        dt = (time.perf_counter() - t) / n
        print(f"{model_name} N={N} threads={threads} {name}: {dt*1000:.0f} ms per step of all {N}, {N/dt:.1f} network-steps/s")
    except Exception as e:
        print(f"{model_name} {name}: failed: {type(e).__name__}: {str(e)[:200]}")
