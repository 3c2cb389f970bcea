"""The analysis tables: each one's name and columns, declared once.

An analysis returns `{table name: DataFrame}` and the application writes each to
`RUN_DIR/analyses/<analysis>/<table>.parquet`; `python -m study compare` writes the
`compare_*` tables beside its report. The analyses build their tables with these columns
(`Table.frame`) and the reports read them by these names, so a renamed or added column is
changed here and nowhere else. `check(name, df)` refuses a table whose columns are not its
schema's. Every table is long-format: one row per measured value, its keys first. What each
column means is documented with the analysis that writes it (`study/analyses/<name>`).

Torch-free (reports, which run without torch, import it); pandas is imported only when
`Table.frame` builds a table.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """One analysis table: its file name (without `.parquet`), the analysis that writes it,
    and its columns in order."""

    name: str
    analysis: str  # the registered analysis (or `compare`, the cross-run command)
    columns: tuple[str, ...]

    def frame(self, rows=()):
        """A pandas DataFrame of `rows` (tuples in column order, or dicts) with exactly these
        columns."""
        import pandas as pd
        return pd.DataFrame(list(rows), columns=list(self.columns))


PATCHING = Table("patching", "patching", (
    "checkpoint", "site", "layer", "position", "head", "counterfactual", "metric", "value",
    "value_all", "n_pairs", "n_changed", "n_tested"))
HEAD_RANKING = Table("head_ranking", "patching", (
    "checkpoint", "counterfactual", "metric", "layer", "head", "value", "rank"))
POSITIONS = Table("positions", "patching", ("checkpoint", "counterfactual", "position", "token"))
PATCHING_ROLES = Table("patching_roles", "patching", (
    "checkpoint", "site", "layer", "head", "role", "counterfactual", "stratum", "metric",
    "value", "value_all", "n_pairs", "n_changed", "n_tested"))
DAS = Table("das", "das", (
    "checkpoint", "variable", "site", "layer", "position", "alignment", "k", "split", "iia",
    "iia_lo", "iia_hi", "iia_all", "n_pairs", "n_changed", "n_tested", "too_few",
    "iia_restart_sd", "chance", "confound_input", "confound_answer"))
# the controls: the same search with the variable's values shuffled across pairs (trained
# network), and on the step-0 network (rows with checkpoint 0)
DAS_SHUFFLED = Table("das_shuffled", "das", DAS.columns)
DAS_CONTROL = Table("das_control", "das", DAS.columns)
# the trained alignments scored, untrained, on a task's control pairs for the variable
# (`pairs`, e.g. binding's renamed letters); `base_kept`: the share of tested pairs whose
# output stayed the base's
DAS_TRANSFER = Table("das_transfer", "das", (*DAS.columns, "pairs", "base_kept"))
# every search's test IIA split by a pair stratum the task names (`Task.iia_strata`, binding:
# `source_depth`); `search` trained | shuffled | step0 (the table the alignment belongs to)
DAS_STRATA = Table("das_strata", "das", (
    "checkpoint", "variable", "site", "layer", "position", "alignment", "k", "split", "search",
    "stratum", "value", "iia", "iia_lo", "iia_hi", "n_pairs", "n_changed", "n_tested",
    "too_few"))
# where a network holds each variable: DAS over every token role x layer, screened at every
# cell and fully searched at the best; `null` is the controls' maximum over the grid
ATLAS = Table("atlas", "atlas", (
    "checkpoint", "model", "seed", "variable", "role", "site", "layer", "stage", "k", "iia",
    "iia_lo", "iia_hi", "train_iia", "n_tested", "too_few", "shuffled_iia", "step0_iia",
    "chance", "null", "null_from", "credited"))
# one variable at its atlas cell along training: the search at each logged checkpoint, warm
# started from the later one's alignment; `null` is the atlas's
EMERGENCE = Table("emergence", "emergence", (
    "checkpoint", "step", "variable", "role", "site", "layer", "k", "iia", "iia_lo", "iia_hi",
    "train_iia", "shuffled_iia", "null", "n_tested", "too_few"))
PROBES = Table("probes", "probes", (
    "checkpoint", "variable", "site", "layer", "position", "split", "accuracy", "control",
    "converged"))
CIRCUITS = Table("circuits", "circuits", ("checkpoint", "layer", "head", "score", "value"))
ABLATION = Table("ablation", "circuits", (
    "checkpoint", "layer", "head", "method", "split", "stratum", "accuracy"))
SUBSPACES = Table("subspaces", "subspaces", (
    "checkpoint", "variable", "site", "alignment", "k", "other_run", "other_checkpoint",
    "other_site", "mean_cos_angle", "min_cos_angle"))
COMPARE_SIMILARITY = Table("compare_similarity", "compare", (
    "variable", "run", "other_run", "checkpoint", "other_checkpoint", "measure", "value",
    "baseline", "random_subspace", "model", "other_model", "site", "other_site", "alignment",
    "k", "n_inputs", "input_code", "output_code", "matched_k", "role", "other_role"))
COMPARE_STITCHING = Table("compare_stitching", "compare", (
    "variable", "run", "other_run", "checkpoint", "other_checkpoint", "iia", "own_iia",
    "shuffled_map_iia", "random_subspace_iia", "fit_r2", "n_changed", "n_tested", "model",
    "other_model", "site", "other_site", "alignment", "k", "input_code_iia", "output_code_iia",
    "chance_iia", "window_changed", "val_iia", "other_val_iia", "auto_k", "other_auto_k",
    "matched_k", "k_bar", "margin", "decode_iia", "position_code_iia",
    "output_code_coverage", "position_code_coverage", "code_refusal",
    "confound_input", "confound_answer", "role", "other_role"))
COMPARE_GEOMETRY = Table("compare_geometry", "compare", (
    "variable", "run", "checkpoint", "model", "site", "alignment", "k", "value", "pc1", "pc2",
    "sd1", "sd2", "n", "held_out", "auto_k", "role"))

TABLES: dict[str, Table] = {t.name: t for t in (
    PATCHING, HEAD_RANKING, POSITIONS, PATCHING_ROLES, DAS, DAS_SHUFFLED, DAS_CONTROL,
    DAS_TRANSFER, DAS_STRATA, ATLAS, EMERGENCE, PROBES,
    CIRCUITS, ABLATION, SUBSPACES,
    COMPARE_SIMILARITY, COMPARE_STITCHING, COMPARE_GEOMETRY)}


# the files other than tables that an analysis always writes beside them, which later
# analyses read (subspaces and compare read das's learned alignments)
ARTEFACTS: dict[str, tuple[str, ...]] = {"das": ("alignments.safetensors",),
                                         "atlas": ("alignments.safetensors",)}


def of_analysis(analysis: str) -> tuple[Table, ...]:
    """The tables an analysis (or `compare`) writes, in declaration order."""
    return tuple(t for t in TABLES.values() if t.analysis == analysis)


def required_files(analysis: str) -> tuple[str, ...]:
    """The file names an analysis must leave in its folder to count as done: each declared
    table's `<table>.parquet` and its artefacts; empty for an analysis that declares no
    tables (one registered outside the toolkit), which is done with any table."""
    tables = tuple(f"{t.name}.parquet" for t in of_analysis(analysis))
    return tables + ARTEFACTS.get(analysis, ()) if tables else ()


def check(name: str, df) -> None:
    """ValueError unless `name` is a declared table and `df` has exactly its columns, in
    order."""
    if name not in TABLES:
        raise ValueError(f"table {name!r} is not declared; declared: {', '.join(TABLES)}")
    got, want = tuple(df.columns), TABLES[name].columns
    if got != want:
        missing = [c for c in want if c not in got]
        extra = [c for c in got if c not in want]
        raise ValueError(f"table {name!r} has columns {list(got)}, its schema {list(want)}"
                         + (f"; missing {missing}" if missing else "")
                         + (f"; undeclared {extra}" if extra else ""))


def check_outputs(analysis: str, tables: dict) -> None:
    """ValueError unless an analysis's returned `{name: DataFrame}` holds exactly the tables
    declared for it, each with exactly its columns."""
    want = [t.name for t in of_analysis(analysis)]
    if sorted(tables) != sorted(want):
        raise ValueError(f"analysis {analysis!r} returned tables {sorted(tables)}; declared "
                         f"{sorted(want)}")
    for name, df in tables.items():
        check(name, df)
