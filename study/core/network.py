"""What the training stage and the analyses may assume of a network, whatever its family.

Every network the model registry builds satisfies `Network`: an `nn.Module` called as
`model(ids)` with `ids` (batch, pos) long, returning logits (batch, pos, vocab);
`model(ids, readout=mask)` with `mask` (batch, pos) bool returns only the scored rows,
(n_true, vocab). It exposes its intervention sites under `model.sites` (the vocabulary is
`study/core/sites.py`), lists them in `site_kinds()`, states `n_layers` and `n_heads`, and carries
the `capabilities` its family declared at registration.

Capabilities are the names in `CAPABILITIES`, the one table of what each promises: site kinds,
attributes, a structural check. A family declares them once
(`register("model", ..., capabilities=(...))`); the registry refuses unknown names, sets
them on every network it builds and checks that the network offers what they promise
(`check_network`). The site kinds a family offers are known from its declared capabilities
before any network is built (`declared_kinds`). Analyses ask `"heads" in model.capabilities`
(or `require`) instead of guessing from attributes, and declare what they need with
`register(..., requires=(...))`.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, runtime_checkable

from study.core.errors import UsageError
from study.core.sites import KINDS


@runtime_checkable
class SiteShape(Protocol):
    """One row of a network's shape table (`study.core.sites.SiteKind`)."""

    name: str  # the site kind
    count: int  # modules in `model.sites.<name>`
    width: int  # features per position or step


@runtime_checkable
class Network(Protocol):
    """The contract of every network the model registry builds.

    `isinstance(model, Network)` checks that the members exist (on Python 3.12+ it cannot see
    submodules such as `sites`); `check_network` checks them on any version, and more."""

    capabilities: frozenset[str]  # the family's declared capabilities (names in CAPABILITIES)
    sites: Any  # `study.models.sites.modules.Sites`: `sites.<kind>[i]` identity modules, `.kinds()`
    n_layers: int  # layers (transformers) or 1 (one recurrent cell)
    n_heads: int  # attention heads per layer; 0 without attention

    def forward(self, ids, readout=None):
        """ids (batch, pos) long -> logits (batch, pos, vocab); with `readout` (batch, pos)
        bool, the logits of the True positions, (n_true, vocab)."""

    def site_kinds(self) -> list[SiteShape]:
        """The site kinds offered, with their module counts and widths."""


@dataclass(frozen=True)
class Capability:
    """What a capability promises: site kinds, attributes, and a further check."""

    name: str
    doc: str
    site_kinds: tuple[str, ...] = ()  # kinds of `model.sites` it promises (names in KINDS)
    attributes: tuple[str, ...] = ()  # attributes of the network it promises
    check: Optional[Callable[[Any], Optional[str]]] = None  # -> what is wrong, or None


def _attention(model) -> Optional[str]:
    if model.n_heads < 1:
        return f"n_heads={model.n_heads} (attention needs at least one head)"
    return None


def _heads(model) -> Optional[str]:
    widths = {k.name: k.width for k in model.site_kinds()}
    if model.n_heads < 1 or widths.get("head", 0) % model.n_heads:
        return (f"its head sites of width {widths.get('head')} do not split into "
                f"n_heads={model.n_heads} equal heads")
    return None


def _residual(model) -> Optional[str]:
    counts = model.sites.kinds()
    if counts.get("resid") != model.n_layers + 1:
        return (f"it has {counts.get('resid')} resid sites; a residual stream has "
                f"n_layers + 1 = {model.n_layers + 1} (the last is the final stream)")
    return None


def _weights_view(model) -> Optional[str]:
    if len(model.blocks) != model.n_layers:
        return f"it has {len(model.blocks)} blocks for n_layers={model.n_layers}"
    for layer, block in enumerate(model.blocks):
        missing = [f"attn.{w}" for w in ("W_Q", "W_K", "W_V", "W_O") if not hasattr(block.attn, w)]
        if not hasattr(block, "mlp"):
            missing.append("mlp")
        elif block.mlp is not None:
            missing += [f"mlp.{w}" for w in ("W_in", "W_out", "act") if not hasattr(block.mlp, w)]
        if missing:
            return f"its blocks[{layer}] lack {', '.join(missing)}"
    return None


CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability("attention", "causal attention layers whose patterns "
               "`study.models.nets.attention.capture_attention` records, their outputs at "
               "`attn_out[l]`", site_kinds=("attn_out",), check=_attention),
    Capability("heads", "per-head attention outputs: `head` sites of width n_heads * d_head, "
               "head h in features [h*d_head, (h+1)*d_head)", site_kinds=("head",),
               check=_heads),
    Capability("residual", "a residual stream: `resid[l]` entering layer l, "
               "l = n_layers the final stream, and the MLP block outputs `mlp_out[l]`",
               site_kinds=("resid", "mlp_out"), check=_residual),
    Capability("recurrent", "a recurrent state: one `state[t]` site per time step",
               site_kinds=("state",)),
    Capability("weights_view", "TransformerLens-named matrices for QK/OV/Fourier views: "
               "W_E (vocab, d), W_pos (seq, d), W_U (d, vocab), blocks[l].attn.W_Q/W_K/W_V "
               "(n_heads, d, d_head) and W_O (n_heads, d_head, d), blocks[l].mlp None or with "
               "W_in (d, d_mlp), W_out (d_mlp, d) and act",
               attributes=("W_E", "W_pos", "W_U", "blocks"), check=_weights_view),
    Capability("learned_positions", "a learned positional embedding W_pos (seq_len, d): inputs "
               "no longer than the seq_len it was built for", attributes=("W_pos", "seq_len")),
)}


def declared_kinds(capabilities) -> tuple[str, ...]:
    """The site kinds a family with these capabilities offers, in the order of KINDS."""
    offered = {k for cap in capabilities if cap in CAPABILITIES
               for k in CAPABILITIES[cap].site_kinds}
    return tuple(k for k in KINDS if k in offered)


class ContractError(TypeError):
    """A built network breaks the network contract or its family's declared capabilities."""


def check_capability_names(names, what: str) -> frozenset[str]:
    """The names as a frozenset; ValueError on a name not in CAPABILITIES."""
    names = frozenset(names)
    unknown = sorted(names - CAPABILITIES.keys())
    if unknown:
        raise ValueError(f"{what}: unknown capabilities {unknown}; known: "
                         f"{', '.join(CAPABILITIES)}")
    return names


def _members(proto) -> list[str]:
    """The attributes and methods a Protocol class declares."""
    names = set(getattr(proto, "__annotations__", {}))
    names |= {k for k, v in vars(proto).items() if callable(v) and not k.startswith("_")}
    return sorted(names)


def check_network(model) -> None:
    """Raise ContractError unless `model` satisfies `Network` and offers what each of its
    `capabilities` promises (site kinds, attributes, structural checks)."""
    name = type(model).__name__
    missing = [m for m in _members(Network) if not hasattr(model, m)]
    if missing:
        raise ContractError(f"{name} lacks {', '.join(missing)} of the network contract")
    if not takes_readout(model):
        raise ContractError(f"{name}.forward does not accept readout=")
    if not isinstance(model.capabilities, frozenset):
        raise ContractError(f"{name}.capabilities must be a frozenset")
    check_capability_names(model.capabilities, name)
    table = model.site_kinds()
    counts = model.sites.kinds()
    if {k.name: k.count for k in table} != counts:
        raise ContractError(f"{name}.site_kinds() {[(k.name, k.count) for k in table]} does not "
                            f"match its sites {counts}")
    for cap in sorted(model.capabilities):
        spec = CAPABILITIES[cap]
        lacking = [a for a in spec.attributes if not hasattr(model, a)]
        absent = [k for k in spec.site_kinds if k not in counts]
        if absent:
            problem = f"it has no {absent[0]!r} sites (only {', '.join(sorted(counts))})"
        elif lacking:
            problem = f"it lacks {', '.join(lacking)}"
        else:
            problem = spec.check(model) if spec.check is not None else None
        if problem:
            raise ContractError(f"{name} declares capability {cap!r}, but {problem}")


def checked_builder(build: Callable, capabilities) -> Callable:
    """`build(config, vocab_size, seq_len)` that sets the family's capabilities on each
    network it builds and checks it (`check_network`): what the model registry stores."""
    capabilities = check_capability_names(capabilities, getattr(build, "__name__", "builder"))

    @functools.wraps(build)
    def checked(config, vocab_size: int, seq_len: int):
        model = build(config, vocab_size, seq_len)
        model.capabilities = capabilities
        check_network(model)
        return model

    return checked


def require(model, *capabilities: str) -> None:
    """UsageError unless the network offers every named capability."""
    check_capability_names(capabilities, "require")
    missing = [c for c in capabilities if c not in model.capabilities]
    if missing:
        raise UsageError(f"this needs a model with {', '.join(missing)}; {type(model).__name__} "
                         f"has {', '.join(sorted(model.capabilities)) or 'none'}")


def takes_readout(model) -> bool:
    """Whether `model(ids, readout=mask)` is supported (the library's networks all accept it)."""
    return _class_takes_readout(type(model))


def read_out(model, ids, readout):
    """The logits of the True positions of `readout` (batch, pos) bool, (n_true, vocab): the
    output layer runs only there when the network takes `readout`, else it is applied to all."""
    if takes_readout(model):
        return model(ids, readout=readout)
    return model(ids)[readout]  # a network without the option


@functools.lru_cache(maxsize=None)
def _class_takes_readout(cls) -> bool:  # read once per class: DAS asks at every step
    return "readout" in inspect.signature(cls.forward).parameters
