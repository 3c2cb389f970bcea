"""The pieces every command builds a run from, each written once: the task of a resolved
configuration, the torch device to work on, and a network as analyses see it (eval mode,
frozen). The runner, the run handle, the sweep's estimate and the checks all call these, so
none of them reaches into another for them. Nothing here imports torch until it is called."""
from __future__ import annotations


def build_task(cfg):
    """The task of a run configuration (`RunConfig`), built through the task registry."""
    from study.core import registry
    return registry.get("task", cfg.task).obj(cfg.task_config)


def choose_device(device=None):
    """The torch device to work on: `device` as given (a name or a `torch.device`), or, for
    None and "auto", the GPU when CUDA is available, else the CPU."""
    import torch
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def frozen(net, device="cpu"):
    """`net` on `device`, in eval mode, its parameters frozen: a network as analyses see it."""
    net = net.to(device).eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net
