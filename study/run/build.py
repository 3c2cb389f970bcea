"""The pieces every command builds a run from, each written once: the task of a resolved
configuration and a network as analyses see it (eval mode, frozen); the device is chosen by
`study.train.runtime.resolve_device`. The runner, the run handle, the sweep's estimate and the checks all call these, so
none of them reaches into another for them. Nothing here imports torch until it is called."""
from __future__ import annotations


def build_task(cfg):
    """The task of a run configuration (`RunConfig`), built through the task registry, once
    its data is known to fit in memory (`study.run.preflight.check_data`)."""
    from study.core import registry
    from study.run.preflight import check_data
    check_data(cfg.task, cfg.task_config)  # data too large for this machine: one line, first
    return registry.get("task", cfg.task).obj(cfg.task_config)


def frozen(net, device="cpu"):
    """`net` on `device`, in eval mode, its parameters frozen: a network as analyses see it."""
    net = net.to(device).eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net
