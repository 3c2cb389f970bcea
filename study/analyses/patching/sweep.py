"""Counterfactual activation patching, batched: the engine behind `study/analyses/patching.py`.

For one kind of counterfactual pairs, every listed site (`resid[l]`, `head[l]` split per
head, `attn_out[l]`, `mlp_out[l]`, or the recurrent `state`) is patched with the source's
activation and the base is re-run:

- aligned pairs (base and source share a layout): at every (site, position) up to the last
  scored position, the source's vector at that position replaces the base's;
- explicit pairs (`base_pos`, `source_pos` given, e.g. counting): the source's vector at
  `source_pos` replaces the base's at `base_pos`, one patch per example (position -1 in the
  table).

Cost. Per chunk of pairs, one forward of the sources and one of the bases record every
site at once. A (example, position) patch can only change anything where the source's vector
differs from the base's, so only those become *jobs*; all jobs of a site, whatever their
positions, are run together in batches of `batch_size` rows (each row carries its own
position), cut to the last scored position. Unchanged rows keep the base's outputs exactly.
The same per-pair outcomes, read at each pair's own token roles (`at_roles`), give the
role-aligned table at no extra forward pass (`study/analyses/patching/roles.py`) [ours].

The patched forwards run through pyvene: one `IntervenableModel` per (site, head) over our
sites (`study.models.sites.pyvene_bridge.site_intervenable` with a `PatchIntervention`, the vanilla
interchange restricted to the head's features), the recorded source vectors handed in as
`source_representations` (`interchange_vectors`).

Which pairs test a patch is decided once, by running the network on every base without
intervention (`study.analyses.common.interchange.judged`): a pair is *tested* when the
network's output is the base label at every scored position and not the counterfactual
label. A pair whose base output is already the counterfactual one "flips" under a patch that
does nothing; one whose base output is wrong says nothing of the patch.

Metrics per (site, position) over the pairs [ours where the papers are silent]:
- `flip_rate`: fraction of the tested pairs whose every scored output equals `cf_labels`
  (the argmax among the task's output ids, as training scores: `study/core/outputs.py`), in
  `value` (NaN for a kind with no tested pair, e.g. binding's `distractor`, none of whose
  pairs is changed); the fraction over all pairs is `value_all`;
- `logit_diff`: mean LD_patched - mean LD_base over the tested pairs, LD = logit(cf answer)
  - logit(base answer) averaged over the positions where the two answers differ; a kind
  none of whose tested pairs has a position scored in both answers with different tokens
  (counting's phase pairs: the phase moves where the answer is scored) has no row;
- `norm_logit_diff` (aligned pairs): (mean LD_patched - mean LD_base) /
  (mean LD_source - mean LD_base), LD_source read from the source run at the same
  positions and pairs: 0 = no effect, 1 = the whole effect of switching inputs. A ratio of
  means, not a mean of per-pair ratios, which explode where a pair's denominator is near 0.
Rows with site "none" give the unpatched base's flip rate (its `value` is 0 by the
definition of a tested pair; `value_all` is the floor over all pairs). Every row carries
n_pairs, n_changed (the causal model's changed pairs, `PairTensors.changed`) and n_tested
(the tested pairs, a subset of the changed); for the logit differences `value_all` equals
`value`.
"""
from __future__ import annotations

import numpy as np
import torch

from study.analyses.common.interchange import (PairTensors, all_right, judged, logit_diff,
                                              scored_end)
from study.analyses.patching.roles import RoleOutcomes
from study.core.sites import STEP_KINDS
from study.core.tables import HEAD_RANKING
from study.models.sites.pyvene_bridge import site_intervenable
from study.models.sites.pyvene_run import interchange_vectors
from study.models.sites.capture import capture


def _units(kind: str, width: int, n_heads: int) -> list[tuple[int, slice | None]]:
    """(head index, feature slice) per patched unit of a site: one per head for `head`."""
    if kind != "head":
        return [(-1, None)]
    d_head = width // n_heads
    return [(h, slice(h * d_head, (h + 1) * d_head)) for h in range(n_heads)]


SUMS = 7  # flips, rows, LD sum, LD rows, flips among tested, tested, changed


class _Acc:
    """Sums per (kind, layer, head, position): flips, rows, LD sums over LD-eligible tested
    rows, their count, flips among tested rows, tested rows, changed rows."""

    def __init__(self):
        self.sums: dict = {}

    def add(self, key, flip: np.ndarray, ld: np.ndarray, ok: np.ndarray,
            tested: np.ndarray, changed: np.ndarray) -> None:
        s = self.sums.setdefault(key, np.zeros(SUMS))
        s += _sums(flip, ld, ok, tested, changed)


def _sums(flip, ld, ok, tested, changed) -> tuple:
    """One batch's contribution to the sums (`SUMS`): LD counts on tested rows only."""
    ok = ok & tested
    return (flip.sum(), len(flip), (ld * ok).sum(), ok.sum(), (flip & tested).sum(),
            tested.sum(), changed.sum())


def _metrics(logits, pt: PairTensors):
    flip = all_right(logits, pt.cf_labels, pt.outputs)
    ld, ok = logit_diff(logits, pt.cf_labels, pt.base_labels)
    return flip, ld, ok


def _patcher(model, kind: str, layer: int, feats: slice | None, cache: dict):
    """The pyvene intervenable patching `(kind, layer)` (only `feats` of it), built once."""
    key = (kind, layer, None if feats is None else (feats.start, feats.stop))
    if key not in cache:
        from study.models.sites.pyvene_interventions import PatchIntervention
        inst = PatchIntervention(features=key[2])
        cache[key] = site_intervenable(model, kind, layer, inst)
    return cache[key]


def _run_jobs(iv, pt: PairTensors, rows, pos, values, batch_size):
    """Patched forwards of base rows `rows` at positions `pos` with the source vectors
    `values` (n_jobs, width), through the intervenable `iv`: flip, ld, ok."""
    flips, lds, oks = [], [], []
    for lo in range(0, len(rows), batch_size):
        r, p = rows[lo:lo + batch_size], pos[lo:lo + batch_size]
        sub = pt.take(r)
        T = scored_end(sub.cf_labels, p)
        with torch.no_grad():
            logits = interchange_vectors(iv, sub.base_ids[:, :T], p, values[lo:lo + batch_size])
        f, ld, ok = _metrics(logits, sub)
        flips.append(f), lds.append(ld), oks.append(ok)
    cat = lambda xs: torch.cat(xs).cpu().numpy()  # noqa: E731
    return cat(flips), cat(lds), cat(oks)


def sweep(model, pt: PairTensors, sites: list[tuple[str, int]], n_heads: int,
          batch_size: int, at_roles: RoleOutcomes | None = None) -> tuple[_Acc, dict]:
    """Patch every site of `sites` (at every position for aligned pairs). Returns the
    accumulator and the base/source reference sums {"base": [...], "source": [...]}. Pairs
    not yet judged (`PairTensors.tests` None) are judged on `model` first. `at_roles`
    (aligned pairs only): filled with every pair's outcomes at its own role positions
    (`study/analyses/patching/roles.py`)."""
    if at_roles is not None and (not pt.aligned or len(at_roles) != len(pt)):
        raise ValueError("role outcomes need aligned pairs, one role row per pair")
    if pt.tests is None:
        pt = judged(model, pt, batch_size)
    acc = _Acc()
    ref = {"base": np.zeros(SUMS), "source": np.zeros(SUMS)}
    patchers: dict = {}
    for lo in range(0, len(pt), batch_size):
        chunk = pt.take(slice(lo, lo + batch_size))
        n = len(chunk)
        T = scored_end(chunk.cf_labels, chunk.base_pos)
        base_ids = chunk.base_ids[:, :T]
        with torch.no_grad(), capture(model, sites if chunk.aligned else []) as base_acts:
            base_logits = model(base_ids)
        fb, ldb, okb = (x.cpu().numpy() for x in _metrics(base_logits, chunk))
        ch = chunk.changed.cpu().numpy()  # (n,) the pairs whose answer must change
        te = chunk.tested.cpu().numpy()  # (n,) those that test a patch on this network
        ref["base"] += _sums(fb, ldb, okb, te, ch)
        T_src = T if chunk.aligned else int(chunk.source_pos.max()) + 1
        with torch.no_grad(), capture(model, sites) as src_acts:
            src_logits = model(chunk.source_ids[:, :T_src])
        if chunk.aligned:  # the source run's LD at the same (aligned) positions
            lds, oks = logit_diff(src_logits, chunk.cf_labels, chunk.base_labels)
            if at_roles is not None:
                at_roles.add_base(lo, fb, ldb, okb, te, ch, lds.cpu().numpy())
            oks = oks & chunk.tested
            ref["source"] += (0, 0, (lds * oks).sum().item(), oks.sum().item(), 0, 0, 0)
        rows_all = torch.arange(n, device=base_ids.device)
        for kind, layer in sites:
            if (kind, layer) not in src_acts:  # a site the network never runs (attn2's
                continue  # layer-0 mlp_out)
            a_src, a_base = src_acts[(kind, layer)], base_acts.get((kind, layer))  # (n, pos, w)
            for head, feats in _units(kind, a_src.shape[-1], n_heads):
                fs = feats if feats is not None else slice(None)
                iv = _patcher(model, kind, layer, feats, patchers)
                if not chunk.aligned:
                    values = a_src[rows_all, chunk.source_pos]
                    f, ld, ok = _run_jobs(iv, chunk, rows_all, chunk.base_pos, values, batch_size)
                    acc.add((kind, layer, head, -1), f, ld, ok, te, ch)
                    continue
                # aligned: only (row, position) where source and base differ need a forward
                differs = (a_src[..., fs] != a_base[..., fs]).any(-1)  # (n, T)
                rows, pos = differs.nonzero(as_tuple=True)
                f_all = np.repeat(fb[:, None], T, 1)  # (n, T) unpatched rows keep the base's
                ld_all = np.repeat(ldb[:, None], T, 1)
                if len(rows):
                    f, ld, _ = _run_jobs(iv, chunk, rows, pos, a_src[rows, pos], batch_size)
                    r, p = rows.cpu().numpy(), pos.cpu().numpy()
                    f_all[r, p], ld_all[r, p] = f, ld
                for p in range(T):
                    acc.add((kind, layer, head, p), f_all[:, p], ld_all[:, p], okb, te, ch)
                if at_roles is not None:  # the same outcomes, at each pair's role positions
                    at_roles.add((kind, layer, head), lo, f_all, ld_all)
    return acc, ref


def tables(acc: _Acc, ref: dict, kind: str, aligned: bool, checkpoint: int):
    """Long rows of the `patching` table for one counterfactual kind: `value` (flip rate over
    tested pairs; NaN for a kind with none), `value_all` (over all pairs), n_pairs,
    n_changed, n_tested."""
    rows = []
    fb, nb, ldb_sum, nld, fbt, nbt, nbc = ref["base"]
    ld_base = ldb_sum / nld if nld else np.nan
    ld_src = ref["source"][2] / nld if nld and aligned else np.nan

    def row(site, layer, position, head, metric, value, value_all, n, n_changed, n_tested):
        rows.append(dict(checkpoint=checkpoint, site=site, layer=layer, position=position,
                         head=head, counterfactual=kind, metric=metric, value=float(value),
                         value_all=float(value_all), n_pairs=int(n), n_changed=int(n_changed),
                         n_tested=int(n_tested)))

    rate = lambda f, n: f / n if n else np.nan  # noqa: E731
    row("none", -1, -1, -1, "flip_rate", rate(fbt, nbt), fb / nb, nb, nbc, nbt)
    for (site, layer, head, pos), (f, n, ld_sum, n_ld, ft, nt, nc) in sorted(acc.sums.items()):
        layer_ = 0 if site in STEP_KINDS else layer
        row(site, layer_, pos, head, "flip_rate", rate(ft, nt), f / n, n, nc, nt)
        if n_ld:  # LD is over tested pairs, at the positions where the answers differ
            effect = ld_sum / n_ld - ld_base
            row(site, layer_, pos, head, "logit_diff", effect, effect, n, nc, nt)
            if aligned and abs(ld_src - ld_base) > 1e-12:
                norm = effect / (ld_src - ld_base)
                row(site, layer_, pos, head, "norm_logit_diff", norm, norm, n, nc, nt)
    return rows


def head_ranking(patching, checkpoint: int):
    """Per (counterfactual, layer, head): the head's effect summed over positions, ranked
    (1 = largest) within each counterfactual and metric. Metrics: `logit_diff` (already an
    effect over the unpatched base) and `flip_gain` (flip_rate on tested pairs minus the
    unpatched base's)."""
    cols = list(HEAD_RANKING.columns)
    heads = patching[patching["site"] == "head"].copy()
    if heads.empty:
        return HEAD_RANKING.frame()
    floor = (patching[(patching["site"] == "none") & (patching["metric"] == "flip_rate")]
             .set_index("counterfactual")["value"])
    flips = heads["metric"] == "flip_rate"
    heads.loc[flips, "value"] -= heads.loc[flips, "counterfactual"].map(floor).to_numpy()
    heads.loc[flips, "metric"] = "flip_gain"
    # a kind with no tested pair has no flip rate (NaN) and so no flip_gain ranking
    heads = heads[heads["metric"].isin(["logit_diff", "flip_gain"]) & heads["value"].notna()]
    if heads.empty:
        return HEAD_RANKING.frame()
    out = (heads.groupby(["counterfactual", "metric", "layer", "head"], as_index=False)["value"]
           .sum())
    out["rank"] = (out.groupby(["counterfactual", "metric"])["value"]
                   .rank(ascending=False, method="first").astype(int))
    out["checkpoint"] = checkpoint
    return out[cols].sort_values(["counterfactual", "metric", "rank"]).reset_index(drop=True)
