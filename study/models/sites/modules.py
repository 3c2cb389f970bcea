"""Identity hook modules that make every intervention site addressable by path.

A `Site` returns its input unchanged; it exists so that pyvene (by module path, e.g.
`"sites.resid[2].output"`) and plain forward hooks see exactly the tensor an analysis means.
They cost nothing at training time and survive `torch.compile`. The kinds and their hook
shapes are listed in `study/core/sites.py`.
"""
from __future__ import annotations

import contextlib
from typing import Callable, NamedTuple

import torch
from torch import nn
from torch.nn.modules import module as _torch_module
from torch.utils.hooks import RemovableHandle

from study.core.sites import KINDS


class Site(nn.Module):
    """y = x. Hooks registered on this module read or replace the site's activation.

    A site keeps the handle of every forward and pre-forward hook registered on it, so that
    what hooks it carries is asked of those handles (`hooks`), not of torch's private hook
    tables; a hook removed in any way (its handle, pyvene's clean-up) is gone from both."""

    def __init__(self):
        super().__init__()
        self._handles: list[RemovableHandle] = []  # not state: state_dict and .to() skip it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def register_forward_hook(self, hook, *args, **kwargs) -> RemovableHandle:
        return self._keep(super().register_forward_hook(hook, *args, **kwargs))

    def register_forward_pre_hook(self, hook, *args, **kwargs) -> RemovableHandle:
        return self._keep(super().register_forward_pre_hook(hook, *args, **kwargs))

    def _keep(self, handle: RemovableHandle) -> RemovableHandle:
        self._handles = [h for h, _ in self.hooks()] + [handle]  # the removed ones dropped
        return handle

    def hooks(self) -> list[tuple[RemovableHandle, Callable]]:
        """(handle, hook) of every forward and pre-forward hook on this site now."""
        out = []
        for handle in self._handles:
            table = handle.hooks_dict_ref()  # the table the hook was registered in
            if table is not None and handle.id in table:
                out.append((handle, table[handle.id]))
        return out


class Sites(nn.Module):
    """`model.sites`: one ModuleList of `Site`s per site kind, e.g. sites.resid[l]."""

    def __init__(self, **counts: int):
        super().__init__()
        unknown = [name for name in counts if name not in KINDS]
        if unknown:
            raise ValueError(f"unknown site kinds {unknown}; the kinds are {', '.join(KINDS)}")
        for name, count in counts.items():
            setattr(self, name, nn.ModuleList(Site() for _ in range(count)))

    def kinds(self) -> dict[str, int]:
        """{kind: number of modules}."""
        return {name: len(mods) for name, mods in self.named_children()}

    def hooked(self, kind: str) -> bool:
        """Whether anything reads or replaces a site of `kind`: a forward (pre-)hook on one
        of its modules, or a global module hook. A network may then skip the kind's sites
        (a fused kernel) only when this is False."""
        return _global_hook() or any(site.hooks() for site in getattr(self, kind, ()))

    def hooked_steps(self, kind: str, n: int) -> list[int] | None:
        """The sorted indices < n of the `kind` sites a forward must run: those carrying a
        forward (pre-)hook, except, under an `only` / `per_row` declaration, indices outside the
        declared ones whose every hook the declaration vouches inert. None when a global module
        hook watches every module call (then every site must run)."""
        if _global_hook():
            return None
        mods = getattr(self, kind, ())
        decl = self.__dict__.get("_declared", {}).get(kind)
        out = []
        for t in range(min(n, len(mods))):
            hooks = [hook for _, hook in mods[t].hooks()]
            if hooks and (decl is None or t in decl.steps or not all(map(decl.inert, hooks))):
                out.append(t)
        return out

    def declared_rows(self, kind: str) -> tuple[torch.Tensor, list[int], bool] | None:
        """(pos (batch,) int64 on the CPU, its distinct values sorted, merged) as declared by
        an active `per_row` block on `kind`, or None: also when a `kind` site carries a hook
        the declaration does not vouch for (a user's hook may read rows at other steps)."""
        decl = self.__dict__.get("_declared", {}).get(kind)
        if decl is None or decl.pos is None:
            return None
        for site in getattr(self, kind, ()):
            if not all(decl.inert(hook) for _, hook in site.hooks()):
                return None
        return decl.pos, sorted(decl.steps), decl.merged

    def declared_clean(self, kind: str) -> torch.Tensor | None:
        """The rows' clean activations (batch, width) handed to an active `per_row` block on
        `kind` (`per_row(clean=...)`), or None (none given, or `declared_rows` is None)."""
        if self.declared_rows(kind) is None:
            return None
        return self.__dict__["_declared"][kind].clean

    def only(self, kind: str, steps, inert=None):
        """Context manager: within the block, hooks at `kind` sites outside `steps` leave their
        site unchanged, so a network may skip those sites. `inert(hook) -> bool` names the hooks
        this holds for (default: every hook); a site with any other hook keeps running."""
        return self._declare(kind, None, steps, inert)

    def per_row(self, kind: str, pos, inert=None, merged: bool = False,
                clean: torch.Tensor | None = None):
        """Context manager: within the block, row i of a forward is read or replaced at its own
        index pos[i] only. The hooks at index t touch only the rows with pos == t, and the
        hooks (vouched by `inert`, as in `only`) at indices no row sits at leave their site
        unchanged. A network may then run the sites on one tensor whose row i holds row i's
        activation at pos[i]. pos: (batch,) ints (list, array or tensor; a device tensor
        costs one host read).
        `merged`: the site at the smallest declared index carries, for every row, what that
        row's own index is to get (a row-wise function, the same at every index), and the
        sites at the other declared indices leave their rows unchanged. The network must
        then apply that one site to each row at the row's own index: once, on the tensor of
        own-index activations, or step by step keeping only the rows at that step. One call
        instead of one per distinct index (a batch of pairs at many time steps).
        `clean` (batch, width): row i's activation at pos[i] in a forward without any
        intervention, read beforehand (`RecurrentLM.clean_states`). A network may then start
        row i there instead of recomputing its indices before pos[i]; the outputs before
        pos[i] are then not computed, so the caller reads only outputs at or after each
        row's own index (`readout`)."""
        pos = torch.as_tensor(pos).reshape(-1).long().cpu()  # (batch,)
        return self._declare(kind, pos, pos.unique().tolist(), inert, merged, clean)

    @contextlib.contextmanager
    def _declare(self, kind, pos, steps, inert, merged=False, clean=None):
        # kept in __dict__: not a buffer or submodule, so state_dict and .to() ignore it
        table = self.__dict__.setdefault("_declared", {})
        if kind in table:
            raise RuntimeError(f"a declaration on the {kind} sites is already active")
        table[kind] = _Declaration(pos, frozenset(int(s) for s in steps), inert or _every_hook,
                                   bool(merged), clean)
        try:
            yield
        finally:
            table.pop(kind, None)


class _Declaration(NamedTuple):
    """An active `Sites.only` / `Sites.per_row` block: pos (batch,) or None, the declared
    indices, the predicate naming the hooks that leave other indices unchanged, and whether
    the smallest index's site acts for every row (`per_row(merged=True)`), and the rows'
    clean activations at their indices where the caller read them (`per_row(clean=...)`)."""
    pos: torch.Tensor | None
    steps: frozenset
    inert: Callable
    merged: bool = False
    clean: torch.Tensor | None = None


def _every_hook(_fn) -> bool:
    return True


def _global_hook() -> bool:
    """Whether a global module hook (`torch.nn.modules.module.register_module_forward_hook`
    or `..._pre_hook`) is registered: it sees every site call. Registered outside any site,
    it has no handle a site keeps, and torch has no public way to ask: its own tables are
    read here, the one place."""
    return bool(_torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks)
