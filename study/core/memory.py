"""How much memory training a network needs (a coarse upper bound), and how much this machine
has: enough to refuse `train.batch_size=1e9` at parse time instead of minutes later in
`std::bad_alloc`.

The estimate is deliberately simple: fp32 weights, gradients and AdamW's two moments (16 bytes a
parameter) plus the activations kept for the backward pass, about
batch × seq_len × layers × (4 × the model's widths + 3 × heads × seq_len) + 3 × vocab floats.
A model config may offer `param_count(vocab_size, seq_len)` (the registered families do) and
`activation_bytes(batch, seq_len)` to replace the generic count with its own.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

FLOAT = 4  # bytes; fp32 is the upper bound (bf16 autocast keeps fewer bytes)
GIB = 1 << 30
# a task's data, generated and held: ids, labels and the generator's own arrays (int64) per
# token, and Python objects (strata, the program being drawn) per row; coarse, an upper bound
TOKEN_BYTES = 32
ROW_BYTES = 512


def split_bytes(rows: int, seq_len: int) -> int:
    """About how many bytes generating and holding `rows` examples of `seq_len` tokens takes
    (a task config's `data_bytes`, checked at parse time: `study.run.preflight.check_data`)."""
    return int(rows) * (int(seq_len) * TOKEN_BYTES + ROW_BYTES)


def host_memory() -> int | None:
    """Bytes of memory this process may use: MemTotal, or a smaller cgroup limit."""
    total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError, AttributeError):
            return None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = int(Path(limit_file).read_text().strip())  # "max" = no limit: ValueError
        except (OSError, ValueError):
            continue
        total = min(total, limit)
    return total


def _int_fields(cfg) -> dict[str, int]:
    if not dataclasses.is_dataclass(cfg):
        return {}
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if isinstance(getattr(cfg, f.name), int) and not isinstance(getattr(cfg, f.name), bool)}


def _widths(cfg) -> list[int]:
    return [v for k, v in _int_fields(cfg).items() if k.startswith("d_")]


def parameter_count(cfg, vocab_size: int, seq_len: int) -> int:
    """The config's own count, or a generic one: embeddings, unembedding and a dense square
    map per width pair and layer."""
    if hasattr(cfg, "param_count"):
        return int(cfg.param_count(vocab_size, seq_len))
    widths, layers = _widths(cfg) or [1], max(1, _int_fields(cfg).get("n_layers", 1))
    w = max(widths)
    return 2 * vocab_size * w + layers * 4 * w * sum(widths)


def activation_bytes(cfg, batch: int, seq_len: int, vocab_size: int) -> int:
    """Bytes of the activations one training step keeps for its backward pass."""
    if hasattr(cfg, "activation_bytes"):
        return int(cfg.activation_bytes(batch, seq_len))
    fields = _int_fields(cfg)
    layers, heads = max(1, fields.get("n_layers", 1)), max(0, fields.get("n_heads", 0))
    per_token = layers * (4 * sum(_widths(cfg) or [1]) + 3 * heads * seq_len) + 3 * vocab_size
    return batch * seq_len * per_token * FLOAT


def training_bytes(cfg, batch: int, seq_len: int, vocab_size: int) -> tuple[int, int]:
    """(bytes for the parameters with their gradients and optimiser state, bytes for the
    activations of one step)."""
    return (parameter_count(cfg, vocab_size, seq_len) * 4 * FLOAT,
            activation_bytes(cfg, batch, seq_len, vocab_size))


def gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB" if n < 1000 * GIB else f"{n / GIB:.2e} GiB"
