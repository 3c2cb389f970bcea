"""Role-aligned patching: the position sweep's outcomes read at each pair's own token roles.

Wu et al. (2025) follow the value along the right-hand-side tokens of the query's chain; those
tokens sit at different absolute positions in each program, so the `patching` table (one row
per position) mixes them. A task names its tokens per pair (`Task.pair_roles`: role -> (n,)
position, -1 where the pair has none) and this table scores each pair patched at *its own*
position of the role [ours].

No extra forward pass: the aligned sweep (`sweep.sweep`) already has every pair's patched
outcome at every position of every site; `RoleOutcomes` keeps, per pair, the outcome at the
pair's role positions (and the pair's unpatched base and source scores), and `role_rows`
scores the pairs that have the role, overall and per value of the task's `pair_role_strata`.
A role position at or past the sweep's cut (after the last scored position) cannot reach an
output of a causal network, so the pair keeps its base outcome there.

Metrics as in `sweep.tables`, over the pairs that have the role (and are in the stratum):
`flip_rate` (`value` over the tested ones, `value_all` over all), `logit_diff` (mean
LD_patched - mean LD_base over the tested pairs with an LD) and `norm_logit_diff` (that
effect over mean LD_source - mean LD_base of the same pairs). Rows with site "none" give the
unpatched base's flip rate over the same pairs.
"""
from __future__ import annotations

import numpy as np

from study.core.sites import STEP_KINDS

ALL = "all"  # the stratum of every pair


class RoleOutcomes:
    """Per-pair outcomes at the role positions, filled chunk by chunk by the sweep.

    roles: name -> (n,) int64 position per pair (-1: the pair has no such token)."""

    def __init__(self, roles: dict[str, np.ndarray]):
        self.names = tuple(roles)
        self.pos = np.stack([np.asarray(roles[r], np.int64) for r in self.names], 1)  # (n, R)
        n = self.pos.shape[0]
        self.base = {k: np.zeros(n, dtype) for k, dtype in (
            ("flip", bool), ("ld", float), ("ok", bool), ("tested", bool), ("changed", bool),
            ("src_ld", float))}
        self.patched: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return int(self.pos.shape[0])

    def add_base(self, lo: int, flip, ld, ok, tested, changed, src_ld) -> None:
        """The unpatched scores of the chunk of pairs starting at `lo`: each (n_chunk,)."""
        hi = lo + len(flip)
        for k, v in (("flip", flip), ("ld", ld), ("ok", ok), ("tested", tested),
                     ("changed", changed), ("src_ld", src_ld)):
            self.base[k][lo:hi] = v

    def add(self, key: tuple[str, int, int], lo: int, flip_all: np.ndarray,
            ld_all: np.ndarray) -> None:
        """One unit's (site kind, layer, head) outcomes on the chunk starting at `lo`:
        flip_all, ld_all (n_chunk, T) per pair and patched position."""
        n, T = flip_all.shape
        pos = self.pos[lo:lo + n]  # (n_chunk, R)
        inside = (pos >= 0) & (pos < T)
        p = np.clip(pos, 0, T - 1)
        rows = np.arange(n)[:, None]
        base_f = self.base["flip"][lo:lo + n, None]
        base_ld = self.base["ld"][lo:lo + n, None]
        if key not in self.patched:
            R = len(self.names)
            self.patched[key] = (np.zeros((len(self), R), bool), np.zeros((len(self), R)))
        f, ld = self.patched[key]
        f[lo:lo + n] = np.where(inside, flip_all[rows, p], base_f)
        ld[lo:lo + n] = np.where(inside, ld_all[rows, p], base_ld)


def _strata(outcomes: RoleOutcomes, strata: dict[str, np.ndarray], label) -> list:
    """[(stratum label, (n,) bool)]: every pair first, then each value of each stratum."""
    out = [(ALL, np.ones(len(outcomes), bool))]
    for name, values in strata.items():
        values = np.asarray(values)
        out += [(label(name, v), values == v) for v in np.unique(values)]
    return out


def role_rows(outcomes: RoleOutcomes, kind: str, checkpoint: int, strata=None,
              label=lambda name, v: f"{name}={v}") -> list[dict]:
    """Rows of the `patching_roles` table for one counterfactual kind. strata: name -> (n,)
    values per pair (the task's `pair_role_strata` of the pairs); label(name, value): how a
    stratum value reads (`Task.stratum_label`). Stratum "all" has a row for every role, NaN
    where no pair has it; a stratum value only for the roles some pair of it has."""
    b = outcomes.base
    rows = []

    def row(site, layer, head, role, stratum, metric, value, value_all, n, nc, nt):
        rows.append(dict(checkpoint=checkpoint, site=site, layer=layer, head=head, role=role,
                         counterfactual=kind, stratum=stratum, metric=metric,
                         value=float(value), value_all=float(value_all), n_pairs=int(n),
                         n_changed=int(nc), n_tested=int(nt)))

    mean = lambda x, m: x[m].mean() if m.any() else np.nan  # noqa: E731
    for stratum, in_stratum in _strata(outcomes, strata or {}, label):
        for r, role in enumerate(outcomes.names):
            m = in_stratum & (outcomes.pos[:, r] >= 0)  # (n,) the pairs that have the role
            if not m.any() and stratum != ALL:
                continue
            t = m & b["tested"]
            ldm = t & b["ok"]  # tested pairs with a logit difference
            n, nc, nt = m.sum(), (m & b["changed"]).sum(), t.sum()
            ld_base, ld_src = mean(b["ld"], ldm), mean(b["src_ld"], ldm)
            row("none", -1, -1, role, stratum, "flip_rate", mean(b["flip"], t),
                mean(b["flip"], m), n, nc, nt)
            for (site, layer, head), (f, ld) in sorted(outcomes.patched.items()):
                layer_ = 0 if site in STEP_KINDS else layer
                fr = f[:, r]
                row(site, layer_, head, role, stratum, "flip_rate", mean(fr, t), mean(fr, m),
                    n, nc, nt)
                if not ldm.any():
                    continue
                effect = mean(ld[:, r], ldm) - ld_base
                row(site, layer_, head, role, stratum, "logit_diff", effect, effect, n, nc, nt)
                if abs(ld_src - ld_base) > 1e-12:
                    norm = effect / (ld_src - ld_base)
                    row(site, layer_, head, role, stratum, "norm_logit_diff", norm, norm, n,
                        nc, nt)
    return rows
