"""The site vocabulary: every place an analysis reads or replaces a network's activations.

Every network exposes its sites as identity hook modules under `model.sites`
(`study/models/sites/modules.py`), so pyvene addresses them by path (`"sites.resid[3].output"`)
and a hand-written hook sees the same tensor:

| site kind  | module path          | hook output shape     | meaning                                  |
|------------|----------------------|-----------------------|------------------------------------------|
| `resid`    | `sites.resid[l]`     | (batch, pos, d_model) | residual stream entering layer l; l = n_layers is the final stream |
| `attn_out` | `sites.attn_out[l]`  | (batch, pos, d_model) | attention block output of layer l        |
| `mlp_out`  | `sites.mlp_out[l]`   | (batch, pos, d_model) | MLP block output of layer l (if any)     |
| `head`     | `sites.head[l]`      | (batch, pos, n_heads * d_head) | per-head attention outputs before the output projection, head h in features [h*d_head, (h+1)*d_head) |
| `state`    | `sites.state[t]`     | (batch, d_state)      | recurrent state after token t (LSTM: [h, c]) |

The first four are *sequence* kinds: one module per layer, hook output (batch, pos, width).
`state` is the *step* kind: one module per time step, hook output (batch, width). Analyses
name a site `(kind, layer)`; for the step kind the layer is 0 and the position is the time
step. A network's `site_kinds()` lists the kinds it offers as `SiteKind`s (name, count,
width). Which kinds a family offers follows from its declared capabilities
(`study.core.network.CAPABILITIES`, `declared_kinds`).

How a site is written, everywhere (tables, saved keys, charts):
- `site_label(kind, layer)`: "resid[1]", "state" (the step kind has one layer);
- `site_key(kind, layer, position)`: the key fragment of a DAS alignment, "resid[1]@pair"
  (position -1: the pair's own position), "state@pair", "resid[3]@17"; `parse_site_key`
  reads it back;
- `site_label(kind, layer, position)`: a chart's label of a site at a position, "resid[1]"
  (the pair's position) or "resid[3]@17".

Torch-free: the registry scan, `study list` and reports read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from study.core.errors import UsageError

SEQUENCE_KINDS = ("resid", "attn_out", "mlp_out", "head")  # one module per layer
STEP_KINDS = ("state",)  # one module per time step
KINDS = SEQUENCE_KINDS + STEP_KINDS

HOOK_SHAPES = {
    "resid": "(batch, pos, d_model)",
    "attn_out": "(batch, pos, d_model)",
    "mlp_out": "(batch, pos, d_model)",
    "head": "(batch, pos, n_heads * d_head)",
    "state": "(batch, d_state)",
}

PAIR = "pair"  # the position part of a site key for "each pair's own position" (-1)


@dataclass(frozen=True)
class SiteKind:
    """One kind of site a network exposes: its module-list name and the width of one unit."""

    name: str  # one of KINDS
    count: int  # number of modules in `model.sites.<name>` (layers, or time steps)
    width: int  # features per position or step (head: n_heads * d_head)


def transformer_site_kinds(n_layers: int, d_model: int, head_width: int) -> list[SiteKind]:
    """The site kinds of a transformer: resid (n_layers + 1), attn_out, mlp_out and head."""
    return [SiteKind("resid", n_layers + 1, d_model), SiteKind("attn_out", n_layers, d_model),
            SiteKind("mlp_out", n_layers, d_model), SiteKind("head", n_layers, head_width)]


# --------------------------------------------------------------------------- labels

def site_label(kind: str, layer: int, position: int = -1) -> str:
    """How a site is written in tables and charts: "resid[1]", "state"; with a position
    p >= 0, "resid[3]@17" (-1, the pair's own position, adds nothing)."""
    where = "" if int(position) < 0 else f"@{int(position)}"
    return (kind if kind in STEP_KINDS else f"{kind}[{int(layer)}]") + where


def site_key(kind: str, layer: int, position: int) -> str:
    """The key fragment of a site at a position, as DAS saves its alignments under:
    "resid[1]@pair", "state@pair", "resid[3]@17"."""
    return site_label(kind, layer) + "@" + (PAIR if int(position) < 0 else str(int(position)))


def parse_site_key(key: str) -> tuple[str, int, int]:
    """(kind, layer, position) of a `site_key` (or a `site_label`): the inverse of both."""
    where, _, pos = key.partition("@")
    kind, _, rest = where.partition("[")
    layer = int(rest.rstrip("]")) if rest else 0
    return kind, layer, -1 if pos in ("", PAIR) else int(pos)


# --------------------------------------------------------------------------- checks

def check_site(model, kind: str, index: int, *, per_module: bool = False) -> None:
    """Raise ValueError unless the model has the site `(kind, index)`.

    By default `index` is the analyses' layer: the step kind has the single layer 0 (the
    position is the time step). With `per_module`, `index` addresses the module
    `sites.<kind>[index]` itself, for the step kind the step (pyvene's addressing)."""
    counts = model.sites.kinds()
    if kind not in counts:
        raise ValueError(f"{type(model).__name__} has no {kind!r} sites; it has "
                         f"{', '.join(sorted(counts))}")
    if kind in STEP_KINDS and not per_module:
        if index != 0:
            raise ValueError(f"{kind} sites have one layer (0); the position is the time step")
    elif not 0 <= index < counts[kind]:
        raise ValueError(f"{kind}[{index}] out of range: {type(model).__name__} has "
                         f"{counts[kind]}")


def default_sites(model, kinds: Sequence[str] = (), layers: Sequence[int] = (), *,
                  every_layer: bool = True, heads: bool = False,
                  setting: str = "sites") -> list[tuple[str, int]]:
    """The `(kind, layer)` sites an analysis works on.

    kinds: the asked site kinds; () = the network's defaults: `state` for a recurrent network,
      else `resid`, plus `head` when `heads` is set and the network has the heads capability.
    layers: the asked layers; () = every layer (`every_layer`) or the middle one,
      n_layers // 2. The step kind is one site, (state, 0); only layer 0 may be asked of it.
    A kind or layer the network lacks is a UsageError naming `<setting>.sites` or
    `<setting>.layers`.
    """
    counts = model.sites.kinds()
    if not kinds:
        if "recurrent" in model.capabilities:
            kinds = STEP_KINDS
        else:
            kinds = ("resid",) + (("head",) if heads and "heads" in model.capabilities else ())
    out = []
    for kind in kinds:
        if kind not in counts:
            raise UsageError(f"{setting}.sites: the model has no {kind!r} sites; it has "
                             f"{', '.join(sorted(counts))}")
        if kind in STEP_KINDS:
            if layers and set(layers) != {0}:
                raise UsageError(f"{setting}.layers={','.join(map(str, layers))}: {kind} sites "
                                 f"have one layer, 0 (the position is the time step)")
            out.append((kind, 0))
            continue
        chosen = layers or (range(counts[kind]) if every_layer else (model.n_layers // 2,))
        for layer in chosen:
            if not 0 <= layer < counts[kind]:
                raise UsageError(f"{setting}.layers: {kind}[{layer}] does not exist; the model "
                                 f"has {counts[kind]} {kind} sites (0..{counts[kind] - 1})")
            out.append((kind, layer))
    return out
