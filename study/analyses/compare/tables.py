"""Building the comparison tables over every pair of subjects (see the package docstring)."""
from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from study.analyses.common.data import sample
from study.analyses.common.identify import pair_confounds
from study.analyses.compare.choice import auto_k, matched_k
from study.analyses.compare.codes import (MIN_COVERAGE, answer_codes, input_codes,
                                          position_codes, refusal, window_changed)
from study.analyses.compare.decode import decoded, source_values, written
from study.analyses.compare.measures import MEASURES, shuffled_baseline
from study.analyses.compare.paired import PairedVectors, RolePairs, SiteRef, paired_vectors
from study.analyses.compare.projection import Subspace
from study.analyses.compare.sites import ATLAS, atlas_cells, check_atlas, choose_site, train_iia
from study.analyses.compare.stitch import (apply_map, fit_map, shuffled, stitched_iia,
                                           tested_iia)
from study.analyses.compare.values import layout, points, site_activations
from study.analyses.das.alignments import control
from study.core.alignments import file_key, parse_file_key
from study.core.tables import COMPARE_GEOMETRY, COMPARE_SIMILARITY, COMPARE_STITCHING


def saved_keys(path) -> dict[tuple[str, str, int], list[str]]:
    """(alignment, variable, k) -> the site labels saved for it, from a das file."""
    from safetensors import safe_open
    out: dict[tuple[str, str, int], list[str]] = {}
    with safe_open(str(path), framework="pt") as f:
        for key in sorted(f.keys()):
            parsed = parse_file_key(key)
            if parsed:
                alignment, variable, site, k = parsed
                out.setdefault((alignment, variable, k), []).append(site)
    return out


def random_space(like: Subspace, seed: int) -> Subspace:
    """A seeded Haar-random rotation with `like`'s standardisation (when no random control
    was saved)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(like.width, like.width, generator=g))  # drawn on the CPU
    q = (q * torch.sign(torch.diagonal(r))).to(like.W.device)  # beside `like`'s tensors
    return Subspace.from_matrix(q, like.k, like.mu, like.sigma)


class _Spaces:
    """Per subject and variable: the learned and random subspaces, paired vectors and the
    receiver-only scores (own IIA, the network-free codes, chance), cached. `cell`: the
    run's atlas cell for the variable (compare.site=atlas), else None. `roles` (a tuple of
    token roles) names the pairs a score is on: those holding every one of them
    (`paired.RolePairs`), the run read at its own role's positions; () every pair, at its
    own positions."""

    def __init__(self, subject, keys, cfg, device, pairs: RolePairs, task=None, cell=None):
        self.s, self.keys, self.cfg, self.device, self.task = subject, keys, cfg, device, task
        self.pairs = pairs  # "fit" | "test" | "val" -> Pairs, kept by roles
        self.cell = cell
        self._vec: dict = {}
        self._space: dict = {}
        self._site: dict = {}
        self._own: dict = {}
        self._codes: dict = {}
        self._decoded: dict = {}

    @property
    def role(self) -> str:
        """The token role this run is read at ("" where the pairs' own positions are)."""
        return self.cell.role if self.cell is not None else ""

    def site(self, variable, k) -> str:
        """The site this run is read at for (variable, k): its atlas cell's, or
        `compare.site`'s choice among the sites its alignment was saved at."""
        if self.cell is not None:
            return self.cell.label
        if (variable, k) not in self._site:
            table = Path(self.s.alignments).parent / "das.parquet"
            self._site[(variable, k)] = choose_site(
                self.keys[(self.cfg.alignment, variable, k)], self.cfg.site, self.s.run,
                lambda: train_iia(table, self.s.checkpoint, self.cfg.alignment, variable, k))
        return self._site[(variable, k)]

    def space(self, alignment, variable, k) -> Subspace:
        if (alignment, variable, k) not in self._space:
            self._space[(alignment, variable, k)] = self._load(alignment, variable, k)
        return self._space[(alignment, variable, k)]

    def _load(self, alignment, variable, k) -> Subspace:
        site = self.site(variable, k)
        label = site if site in self.keys.get((alignment, variable, k), ()) else None
        if alignment == control() and label is None:
            learned = self.space(self.cfg.alignment, variable, k)
            return random_space(learned, self.cfg.seed * 7919 + k).to(self.device)
        return Subspace.from_file(self.s.alignments, file_key(alignment, variable, label, k)
                                  ).to(self.device)

    def vectors(self, label, which, roles=()) -> PairedVectors:
        """This run's vectors at `label` on the pairs of split `which` kept by `roles`, at its
        own role's positions there (the pairs' own where it has none)."""
        if (label, which, roles) not in self._vec:
            pairs, at = self.pairs.get(which, roles)
            self._vec[(label, which, roles)] = paired_vectors(
                self.s.model, pairs, SiteRef.parse(label), self.device, outputs=self.task,
                positions=at.get(self.role))
        return self._vec[(label, which, roles)]

    def own(self, variable, k, which, roles=()) -> float:
        """The run's own interchange IIA at k on its tested pairs of `which` kept by `roles`
        (its subspace, its source vectors)."""
        if (variable, k, which, roles) not in self._own:
            label = self.site(variable, k)
            sb, v = self.space(self.cfg.alignment, variable, k), self.vectors(label, which, roles)
            self._own[(variable, k, which, roles)] = tested_iia(
                self.s.model, SiteRef.parse(label), sb, v.pairs, sb.read(v.source),
                v.pairs.tested.cpu().numpy())
        return self._own[(variable, k, which, roles)]

    def decoded(self, variable, k, roles=()) -> np.ndarray | None:
        """(n_test,) the variable's value decoded from this run's coordinates at each test
        source (`decode`, fitted on the fitting sources), or None where the pairs name no
        source value."""
        values = source_values(self.pairs.get("fit", roles)[0])
        if values is None:
            return None
        if (variable, k, roles) not in self._decoded:
            label, space = self.site(variable, k), self.space(self.cfg.alignment, variable, k)
            self._decoded[(variable, k, roles)] = decoded(
                space.read(self.vectors(label, "fit", roles).source), values,
                space.read(self.vectors(label, "test", roles).source))
        return self._decoded[(variable, k, roles)]

    def codes(self, variable, k, roles=()) -> dict:
        """This run as the receiver of the network-free codes at k (`codes`) on the pairs kept
        by `roles`: stitching IIA of the input-window, answer and position codes (the answer
        and position codes' NaN where they cover too few changed test pairs, `refusal` saying
        why), their coverage, the chance level (its own subspace written with the sources of
        other pairs), the share of pairs whose input window changes, and each similarity
        measure of the input and answer codes with its subspace. Every code is read at this
        run's positions: the input window and the clock at the position written (and read),
        the answer keyed relative to it."""
        if (variable, k, roles) not in self._codes:
            self._codes[(variable, k, roles)] = self._score_codes(variable, k, roles)
        return self._codes[(variable, k, roles)]

    def _score_codes(self, variable, k, roles) -> dict:
        cfg, label = self.cfg, self.site(variable, k)
        site, sb = SiteRef.parse(label), self.space(cfg.alignment, variable, k)
        fb, tb = self.vectors(label, "fit", roles), self.vectors(label, "test", roles)
        tested = tb.pairs.tested.cpu().numpy()
        run = lambda z: tested_iia(self.s.model, site, sb, tb.pairs, z, tested)  # noqa: E731
        in_fit, in_src, in_both = input_codes(fb.pairs, tb.pairs, cfg.input_window)
        out_fit, out_cf, out_both, out_cover = answer_codes(fb.pairs, tb.pairs)
        pos_fit, pos_src, _, pos_cover = position_codes(fb.pairs, tb.pairs)
        dev = sb.W.device
        m_in = fit_map(in_fit.to(dev), sb.read(fb.both), one_hot=True)
        refused = [r for r in (refusal("answer code", out_cover),
                               refusal("position code", pos_cover)) if r]

        def code_iia(fit_code, rows, written, cover) -> float:  # NaN where refused
            if not cover >= MIN_COVERAGE:
                return float("nan")
            return run(apply_map(fit_map(fit_code.to(dev), rows, one_hot=True), written.to(dev)))

        zb = sb.read(tb.both).cpu().numpy()
        out = dict(input_code_iia=run(apply_map(m_in, in_src.to(dev))),
                   output_code_iia=code_iia(out_fit, sb.read(fb.source), out_cf, out_cover),
                   position_code_iia=code_iia(pos_fit, sb.read(fb.both), pos_src, pos_cover),
                   output_code_coverage=out_cover, position_code_coverage=pos_cover,
                   code_refusal="; ".join(refused),
                   chance_iia=run(shuffled(sb.read(tb.source), cfg.seed + 1)),
                   window_changed=float(window_changed(tb.pairs, cfg.input_window).mean()))
        c = pair_confounds(self.task, tb.pairs, cfg.input_window)
        out.update(confound_input=c.input, confound_answer=c.answer)
        codes = in_both.cpu().numpy(), out_both.cpu().numpy()
        out["similarity"] = {name: (fn(codes[0], zb), fn(codes[1], zb))
                             for name, fn in MEASURES.items()}
        return out


def _r2(za, zb, M) -> float:
    pred = apply_map(M, za)
    ss = float(((zb - zb.mean(0)) ** 2).sum())
    return float(1 - float(((zb - pred) ** 2).sum()) / ss) if ss > 0 else float("nan")


def _validation(task) -> tuple[str, int]:
    """(split, seed offset) of the validation pairs that choose k: the task's `val` split,
    else training programs drawn with another seed [ours: never the test split]."""
    return ("val", 0) if "val" in getattr(task, "splits", ()) else ("train", 1)


def build_tables(subjects, task, cfg, device) -> dict[str, pd.DataFrame]:
    cells = _atlas_cells(subjects, cfg)
    keys = {id(s): _saved(s, cells) for s in subjects}
    shared = set.intersection(*[{(v, k) for a, v, k in ks if a == cfg.alignment}
                                for ks in keys.values()]) if keys else set()
    variables = [v for v in dict.fromkeys(v for ks in keys.values() for a, v, _ in ks)
                 if any(sv == v for sv, _ in shared)]
    if cfg.variables:
        for s in subjects if cells else ():  # before anything is computed
            check_atlas(cells[id(s)], cfg.variables, s.run)
        missing = [v for v in cfg.variables if v not in variables]
        if missing:
            raise ValueError(f"compare.variables: {', '.join(missing)} not saved by every run")
        variables = list(cfg.variables)
    sim, stitch, geo = [], [], []
    acts: dict = {}  # (subject, site label) -> activations of the geometry's sequences
    ids, known = _geometry_inputs(task, cfg) if variables else (None, {})
    val_split, val_offset = _validation(task)
    for variable in variables:
        ks = sorted(k for v, k in shared if v == variable and (cfg.k == "auto" or k in cfg.k))
        if not ks:
            continue
        pairs = RolePairs({
            "fit": task.counterfactuals(variable, cfg.n_fit, split="train", seed=cfg.seed),
            "test": task.counterfactuals(variable, cfg.n_test, split="test", seed=cfg.seed),
            "val": task.counterfactuals(variable, cfg.n_test, split=val_split,
                                        seed=cfg.seed + val_offset)}, task)
        spaces = {id(s): _Spaces(s, keys[id(s)], cfg, device, pairs, task,
                                 cells[id(s)][variable] if cells else None) for s in subjects}
        _warn_moved(variable, pairs, spaces.values())
        # each run's own k on validation pairs at its own cell (its role's pairs)
        val = {i: {k: sp.own(variable, k, "val", _roles(sp)) for k in ks}
               for i, sp in spaces.items()}
        auto = {i: auto_k(v, cfg.k_bar)[0] for i, v in val.items()}
        for k in ks:
            logging.getLogger(__name__).info(f"compare: {variable}, k={k}, {len(subjects)} runs")
            for a in subjects:
                A = spaces[id(a)]
                la = A.site(variable, k)
                sa = A.space(cfg.alignment, variable, k)
                geo += [dict(r, auto_k=auto[id(a)], role=A.role) for r in _geometry(
                    a, task, variable, la, sa, cfg, device, k, (ids, known.get(variable)), acts)]
                for b in subjects:
                    B = spaces[id(b)]
                    roles = _roles(A, B)  # the pairs that hold both runs' roles
                    if not all(len(pairs.get(w, roles)[0].base_ids) for w in ("fit", "test")):
                        warnings.warn(f"compare.site=atlas: no {variable} pair holds both "
                                      f"{' and '.join(roles)}; {a.run} -> {b.run} left out")
                        continue
                    stitch_row, sim_rows = _pair_rows(a, b, A, B, variable, k, roles, cfg)
                    matched = matched_k(auto[id(a)], auto[id(b)])
                    sim += [dict(r, matched_k=matched) for r in sim_rows]
                    stitch.append(dict(
                        stitch_row, val_iia=val[id(a)][k], other_val_iia=val[id(b)][k],
                        auto_k=auto[id(a)], other_auto_k=auto[id(b)], matched_k=matched,
                        k_bar=cfg.k_bar, margin=cfg.margin))
    return {COMPARE_SIMILARITY.name: COMPARE_SIMILARITY.frame(sim),
            COMPARE_STITCHING.name: COMPARE_STITCHING.frame(stitch),
            COMPARE_GEOMETRY.name: COMPARE_GEOMETRY.frame(geo)}


def _atlas_cells(subjects, cfg) -> dict:
    """id(subject) -> {variable: AtlasCell} at compare.site=atlas (every run checked before
    anything is computed: a UsageError names the first without an atlas), else {}."""
    if cfg.site != ATLAS:
        return {}
    return {id(s): atlas_cells(s.alignments, s.checkpoint, cfg.alignment, s.run)
            for s in subjects}


def _saved(subject, cells) -> dict:
    """`saved_keys` of the subject's alignments; at compare.site=atlas only the variables its
    atlas has a full row for."""
    keys = saved_keys(subject.alignments)
    if not cells:
        return keys
    mine = cells[id(subject)]
    return {key: sites for key, sites in keys.items() if key[1] in mine}


def _warn_moved(variable, pairs: RolePairs, spaces) -> None:
    """A warning where a run is read at a token role (compare.site=atlas) that is not where
    the variable's pairs carry their own positions: there the counterfactual label is that
    of an intervention at the pair's positions, not at the role's (aligned pairs, whose
    label is the sequence's answer, are not warned about)."""
    if (np.asarray(pairs.get("test")[0].base_pos) < 0).all():
        return
    for sp in spaces:
        if not sp.role:
            continue
        kept, at = pairs.get("test", (sp.role,))
        base, source = at[sp.role]
        own = float(((base == kept.base_pos) & (source == kept.source_pos)).mean()
                    ) if len(base) else float("nan")
        if not own >= 1:
            warnings.warn(f"compare.site=atlas: {variable}'s pairs carry their own positions "
                          f"and {sp.s.run} is read at {sp.role}, which is theirs in {own:.0%} "
                          f"of its test pairs; elsewhere the label is that of an intervention "
                          f"at the pair's positions")


def _roles(*spaces) -> tuple[str, ...]:
    """The token roles the runs are read at (compare.site=atlas), sorted; () for none."""
    return tuple(sorted({sp.role for sp in spaces if sp.role}))


def _pair_rows(a, b, A, B, variable, k, roles, cfg) -> tuple[dict, list[dict]]:
    """One ordered pair of runs at k on the pairs kept by `roles`: the stitching row (less
    the k choice's columns) and the similarity rows (less matched_k)."""
    la, lb = A.site(variable, k), B.site(variable, k)
    sa, ra = A.space(cfg.alignment, variable, k), A.space(control(), variable, k)
    sb, rb = B.space(cfg.alignment, variable, k), B.space(control(), variable, k)
    ta, fa = A.vectors(la, "test", roles), A.vectors(la, "fit", roles)
    tb, fb = B.vectors(lb, "test", roles), B.vectors(lb, "fit", roles)
    common = dict(variable=variable, run=a.run, other_run=b.run, checkpoint=a.checkpoint,
                  other_checkpoint=b.checkpoint, model=a.model_name, other_model=b.model_name,
                  site=la, other_site=lb, role=A.role, other_role=B.role,
                  alignment=cfg.alignment, k=k)
    za, zb = sa.read(ta.both).cpu().numpy(), sb.read(tb.both).cpu().numpy()
    zr = rb.read(tb.both).cpu().numpy()
    codes = B.codes(variable, k, roles)
    sim = []
    for name, fn in MEASURES.items():
        code_in, code_out = codes["similarity"][name]
        sim.append(dict(common, measure=name, value=fn(za, zb),
                        baseline=shuffled_baseline(fn, za, zb, cfg.n_perm, cfg.seed),
                        random_subspace=fn(za, zr), n_inputs=len(za), input_code=code_in,
                        output_code=code_out))
    tested = tb.pairs.tested.cpu().numpy()  # B's: the pairs it tests
    scores = _stitching(a, b, sa, sb, ra, rb, fa, fb, ta, tb, lb, tested, cfg,
                        source_values(B.pairs.get("fit", roles)[0]),
                        A.decoded(variable, k, roles))
    scored = {c: codes[c] for c in (
        "input_code_iia", "output_code_iia", "chance_iia", "window_changed",
        "position_code_iia", "output_code_coverage", "position_code_coverage",
        "code_refusal", "confound_input", "confound_answer")}
    return dict(common, own_iia=B.own(variable, k, "test", roles),
                n_changed=int(tb.pairs.changed.sum()), **scores, **scored), sim


def _stitching(a, b, sa, sb, ra, rb, fa, fb, ta, tb, lb, tested, cfg, values,
               decoded_a) -> dict:
    """Network -> network stitching of A into B through the affine map, its controls, and
    decode-then-write (`decode`: B's class means, by the fitting sources' `values`, of the
    values `decoded_a` from A's test sources; NaN where the pairs name no values)."""
    site_b = SiteRef.parse(lb)
    za_fit, zb_fit = sa.read(fa.both), sb.read(fb.both)
    M = fit_map(za_fit, zb_fit)
    M_shuf = fit_map(shuffled(za_fit, cfg.seed), zb_fit)
    M_rand = fit_map(ra.read(fa.both), rb.read(fb.both))
    src = sa.read(ta.source)
    decode_iia = float("nan")
    if values is not None:
        decode_iia = tested_iia(b.model, site_b, sb, tb.pairs,
                                written(sb.read(fb.source), values, decoded_a), tested)
    return dict(
        iia=stitched_iia(b.model, site_b, sb, M, src, tb.pairs, tested), decode_iia=decode_iia,
        shuffled_map_iia=stitched_iia(b.model, site_b, sb, M_shuf, src, tb.pairs, tested),
        random_subspace_iia=stitched_iia(b.model, site_b, rb, M_rand, ra.read(ta.source),
                                         tb.pairs, tested),
        fit_r2=_r2(za_fit.cpu(), zb_fit.cpu(), M), n_tested=int(tested.sum()))


def _geometry_inputs(task, cfg):
    """(ids (n, pos), {variable: values (n, pos)}) of the geometry: test and held-out
    sequences [ours], the task's probe variables on them."""
    splits = [s for s in ("test", "heldout") if s in task.splits]
    parts = [sample(task, s, cfg.n_geometry, cfg.seed)[0] for s in splits]
    width = max(p.shape[1] for p in parts)  # splits may be narrower than one another
    ids = np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])),
                                 constant_values=task.pad_id) for p in parts])
    return ids, {v: np.asarray(x) for v, x in task.probe_variables(ids).items()}


def _geometry(subject, task, variable, label, space, cfg, device, k, inputs, acts) -> list[dict]:
    ids, values = inputs
    if values is None:
        return []
    if (id(subject), label) not in acts:
        acts[(id(subject), label)] = site_activations(subject.model, SiteRef.parse(label), ids,
                                                      device)
    z, v = points(acts[(id(subject), label)], space, values)
    held = set(int(c) for c in getattr(task.config, "held_out", ()))  # counting's held-out counts
    df = layout(z, v)
    return [dict(variable=variable, run=subject.run, checkpoint=subject.checkpoint,
                 model=subject.model_name, site=label, alignment=cfg.alignment, k=k,
                 held_out=int(r["value"]) in held, **r) for r in df.to_dict("records")]
