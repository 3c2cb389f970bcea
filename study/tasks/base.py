"""What every task family provides: splits of token arrays, strata, rendering, causal pairs.

Everything here is numpy and pure: a task's data is a function of its config (which holds the
data seed) and the example index, the same bytes on every machine. Torch never appears in a
task; the training engine and analyses turn these arrays into tensors.

Conventions shared by all tasks (the engine and analyses rely on them):
- `ids`    (n, width) integer token ids (any integer dtype; compact ones such as uint8 keep
  500k-example splits small), right-padded with `pad_id`; a split may be narrower than
  `seq_len` (its own longest example) but never wider. Code that turns ids into numbers
  (subtracts a token offset, or mixes them with -1) converts them to a signed dtype first:
  unsigned arithmetic wraps, and an unsigned array beside a negative Python int depends on
  the numpy version (`np.where(c, uint8_ids, -1)` holds 255 on numpy 2.4, raises on 2.5).
- `labels` (n, width) signed integers: the token the model must predict *at* that position
  (i.e. the next token), or IGNORE (-1) where nothing is scored. An example is correct when every
  scored position is right; that is how binding/assign_add answers and counting's
  "every response token and the EOS" criterion become one rule.
- `strata` maps a stratum name to an (n,) integer/bool array, e.g. binding's `depth`.
  Counterfactual pairs of every causal variable carry the stratum `value`: the value the
  variable takes in the source (an integer code), which DAS's shuffled-variable control
  matches pairs by.

What analyses read of a task's semantics is asked of the task itself (`Task` below), each with
a default that means "none" or "not applicable", so a new task works without them:
`probe_variables` (probes), `attention_targets` and `progress_measures` (circuit scores),
`operands` (Exoo et al.'s operand views), `stratum_label` (tables by stratum),
`pair_roles` (role-aligned patching: where each pair's named token roles sit),
`roles` and `role_names` (the token roles of a sequence, the atlas's grid),
`value_labels` (the base's output with the variable set to a given value),
`Pairs.changed` (counterfactual pairs whose intervention must change the output), and
`output_ids` (the output vocabulary the loss and accuracy score; default every token).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from study.core.labels import IGNORE  # noqa: F401  (re-exported: tasks write it)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Examples:
    """A batch of examples of one split."""

    ids: np.ndarray  # (n, width) integer ids, width <= task.seq_len
    labels: np.ndarray  # (n, width) signed integers, IGNORE where unscored
    strata: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (n,)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, index) -> "Examples":
        return Examples(self.ids[index], self.labels[index],
                        {k: v[index] for k, v in self.strata.items()})


@dataclass(frozen=True)
class Pairs:
    """Counterfactual (base, source) pairs for one causal variable or counterfactual kind.

    An intervention copies the variable's representation from `source` at `source_pos` into
    `base` at `base_pos`; `cf_labels` is what the causal model says the base must then
    output (IGNORE where unscored). For aligned kinds (binding's swaps) base and source have
    equal layouts and `base_pos == source_pos == -1` means "any position, aligned".
    """

    kind: str
    base_ids: np.ndarray  # (n, seq_len)
    source_ids: np.ndarray  # (n, seq_len)
    base_labels: np.ndarray  # (n, seq_len) what the unintervened base outputs
    cf_labels: np.ndarray  # (n, seq_len) what a successful intervention makes it output
    base_pos: np.ndarray  # (n,) int64, -1 when aligned
    source_pos: np.ndarray  # (n,) int64, -1 when aligned
    strata: dict[str, np.ndarray] = field(default_factory=dict)
    # (n, seq_len) what the unintervened source outputs (its own labels), so that an analysis
    # can keep only the pairs whose source the network answers too; None where the task's
    # pairs do not say
    source_labels: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.base_ids.shape[0])

    @property
    def changed(self) -> np.ndarray:
        """(n,) bool: the counterfactual output differs from the base output at some scored
        position (a pair whose intervention, if it works, changes what the model says). A
        position scored in one and IGNORE in the other counts as a difference: the base's
        output there is undetermined or unscored, never the counterfactual token."""
        return (np.asarray(self.cf_labels) != np.asarray(self.base_labels)).any(axis=1)  # (n,)


@dataclass(frozen=True)
class ProgressMeasures:
    """Task facts behind Exoo et al.'s (2026) progress measures, read by the circuits
    analysis; the defaults mean "not applicable" and switch the measure off.

    - `topk_targets`: attention target (a key of `Task.attention_targets`) -> score name; the
      score is the fraction of query rows whose m most-attended keys are exactly the target's
      m keys (their top-1 / top-2 criterion), per head and for the head-summed pattern;
    - `probes`: score name -> probe variable (a key of `Task.probe_variables`) decoded by a
      linear probe from the residual after the first attention layer (their
      `probe_l1_var_from_num`);
    - `prefix_len`: positions 0..prefix_len-1 hold `[variable, value]` assignments
      (`qk_num_to_prev_var`: does layer-l QK favour the previous position there);
    - `variable_ids`: token ids of the variable names (`qk_var_identity`);
    - `modulus`, `number_ids`: the answer is (x + y) mod `modulus` of the two `Task.operands`,
      residue r written as token `number_ids[r]` (`ov_mlp_accuracy`, `fourier_frac`,
      `cos_premlp_ov`).
    """

    topk_targets: dict[str, str] = field(default_factory=dict)
    probes: dict[str, str] = field(default_factory=dict)
    prefix_len: int = 0
    variable_ids: tuple[int, ...] = ()
    modulus: int = 0
    number_ids: tuple[int, ...] = ()


class Task(ABC):
    """Base class of task families. Subclasses are registered with
    `@register("task", NAME, config=ConfigCls, presets={...})` and set the class attributes."""

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    """Version of the generator: raise it when a change to the code alters the data a config
    makes, so that `fingerprint` (dataset caches, run hashes) tells the old data from the new."""
    train_presets: ClassVar[dict[str, dict[str, Any]]] = {}
    """Training settings per scale (scale -> `TrainConfig` field -> value): the optimiser and
    schedule belong to the paper that defines the task. A scale that is absent, or a field
    that a preset omits, keeps the `TrainConfig` default."""
    family_presets: ClassVar[dict[str, dict[str, dict[str, str]]]] = {}
    """A model family's settings on this task at a scale (scale -> family -> key=value, as on
    the command line: `train.lr`, `model.dropout`, `das.layers`), applied over the scale's
    presets and under the command line: the variant of each family the task's page documents
    (binding's laptop variant), which `run` and the study files train alike. Analysis keys
    apply where that analysis is asked for."""
    standard_analyses: ClassVar[dict[str, str]] = {"analyses": "patching,das",
                                                   "das.variables": "main"}
    """What `run` analyses when no `analyses=` is given, as key=value settings: patching, and
    DAS on the task's headline variables (`main_variables`) at the scale's budget."""
    # Splits scored during training (the engine evaluates each, per stratum, at checkpoints).
    eval_splits: ClassVar[tuple[str, ...]] = ("val", "test")
    # the evaluation splits whose joint rise marks the task's transition (its first
    # evaluation with every one >= 0.95), which reports set beside the published run's; ()
    # where the task has none
    transition_splits: ClassVar[tuple[str, ...]] = ()
    # Causal variables of the symbolic model and the counterfactual kinds pairs can be built for.
    causal_variables: ClassVar[tuple[str, ...]] = ()
    counterfactual_kinds: ClassVar[tuple[str, ...]] = ()
    # Several causal variables interchanged at once, e.g. a causal model's whole state: DAS
    # accepts them by name (`das.variables`) but never searches them by default.
    joint_variables: ClassVar[tuple[str, ...]] = ()
    # Control pairs per causal variable: counterfactual kinds on which DAS scores the
    # variable's trained alignments without training them (binding's renamed-letters control:
    # `query` -> `renamed:query`). Every kind named here is one of `counterfactual_kinds`.
    control_pairs: ClassVar[dict[str, tuple[str, ...]]] = {}
    # The headline causal variables (`das.variables=main`, the `small` preset's default);
    # empty = every causal variable.
    main_variables: ClassVar[tuple[str, ...]] = ()
    # The names `probe_variables` returns, known before any data exists so that a setting
    # such as `probes.variables=...` is checked when the command line is parsed.
    probe_variable_names: ClassVar[tuple[str, ...]] = ("output",)
    # The token roles `roles` names (each alone or as `<role>@<i>`), known before any data
    # exists so that `atlas.roles=...` is checked when the command line is parsed.
    role_names: ClassVar[tuple[str, ...]] = ()
    # Whether a pair's labels depend on the token it is intervened at, so that the atlas draws
    # each cell's pairs at its role (`role_counterfactuals`); counting's do.
    pairs_by_role: ClassVar[bool] = False
    # The pair strata (`Pairs.strata` names) the role-aligned patching table is also split by
    # (`pair_roles`); binding: `depth`, since deeper chains have more roles.
    pair_role_strata: ClassVar[tuple[str, ...]] = ()
    # The pair strata every DAS IIA is also split by (table `das_strata`); binding:
    # `source_depth`, the hops the source's own chain takes.
    iia_strata: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config):
        self.config = config
        self._cache: dict[str, Examples] = {}

    # --- vocabulary -------------------------------------------------------------------
    @property
    @abstractmethod
    def vocab(self) -> tuple[str, ...]:
        """Every token, in id order; must include "PAD"."""

    @property
    def pad_id(self) -> int:
        return self.vocab.index("PAD")

    @property
    @abstractmethod
    def seq_len(self) -> int:
        """Longest sequence over every split (models size their positions to this)."""

    @property
    def output_ids(self) -> tuple[int, ...] | None:
        """Token ids the model's output is scored over: the training loss is the softmax over
        these logits only, and a prediction is the argmax among them (the engine's loss and
        accuracy, analyses' `correct`). None (default): every token."""
        return None

    def encode(self, tokens) -> list[int]:
        index = {t: i for i, t in enumerate(self.vocab)}
        return [index[t] for t in tokens]

    @abstractmethod
    def render(self, ids: np.ndarray) -> str:
        """Human rendering of one (seq_len,) row, padding dropped (the task's text format)."""

    @abstractmethod
    def label_of(self, labels: np.ndarray) -> Any:
        """The target of one example in human terms (an int, or a list of tokens)."""

    # --- data -------------------------------------------------------------------------
    @property
    @abstractmethod
    def splits(self) -> tuple[str, ...]:
        """Names of the splits: "train", "val", "test", then evaluation pools or
        generalisation sets."""

    @abstractmethod
    def generate(self, split: str) -> Examples:
        """Build a whole split from scratch (called once; `split()` caches the result)."""

    def split(self, name: str) -> Examples:
        """A split, from memory, else from the disk cache, else generated and cached."""
        if name not in self.splits:
            from study.core.errors import UsageError
            raise UsageError(f"split={name!r} is not a split of task {self.name}; "
                             f"choose from {', '.join(self.splits)}")
        if name not in self._cache:
            self._cache[name] = _disk_cached(self, name)
        return self._cache[name]

    def train_batch(self, step: int, batch_size: int) -> Examples | None:
        """Tasks whose training batches are sampled on the fly return batch `step` here (a
        pure function of config and step); tasks with a fixed training set return None and
        the engine shuffles `split("train")`."""
        return None

    def examples(self, split: str, n: int) -> list[dict]:
        """The first n examples of a split as JSON-ready dicts (for `study sample`)."""
        ex = self.split(split).take(slice(0, n))
        rows = []
        for i in range(len(ex)):
            row = {"text": self.render(ex.ids[i]), "label": self.label_of(ex.labels[i]),
                   "split": split}
            row.update({k: _plain(v[i]) for k, v in ex.strata.items()})
            rows.append(row)
        return rows

    def heuristics(self, split: str = "test") -> list[dict]:
        """Accuracy of shortcut rules on a split, per stratum: rows of
        {"heuristic", "stratum", "value", "accuracy", "n"} (stratum "all", value "all" for the
        whole split). Tasks with no meaningful shortcut return []."""
        return []

    def reference_curves(self) -> list[dict]:
        """A published run's accuracy along its training, scored on this task's own eval
        splits, for reports to draw a run's curves against: rows of {"source", "step",
        "split", "accuracy"}. [] where the task has none, or where this configuration's
        splits are not the ones it was scored on."""
        return []

    # --- causal model ------------------------------------------------------------------
    @abstractmethod
    def counterfactuals(self, kind: str, n: int, split: str = "test", seed: int = 0) -> Pairs:
        """n pairs of a counterfactual kind or causal variable (see `Pairs`), a pure function
        of (config, kind, n, split, seed)."""

    def role_counterfactuals(self, kind: str, n: int, role: str, split: str = "test",
                             seed: int = 0) -> Pairs:
        """n pairs of `kind` each intervened at token role `role` (a `roles` name) in the base,
        labelled for that intervention: for a task whose labels depend on where a pair is
        intervened (`pairs_by_role`; counting: the count set at one step changes what follows
        it). A task whose pairs keep their labels wherever they are intervened (binding's are
        the program's answer) has none: the atlas moves `counterfactuals` to the role."""
        raise NotImplementedError(f"task {self.name} draws no pairs at a role")

    # --- what analyses read (defaults: none / not applicable) ----------------------------
    def labels_of(self, ids: np.ndarray) -> np.ndarray | None:
        """The causal model's labels ((n, seq_len), IGNORE where unscored) of any sequences
        `ids` ((n, seq_len)) the task can read, as a generated split's labels are: what a
        network that does the task outputs on them. For the identifiability of a pair set
        (`study.analyses.common.identify`). Default: None, the task cannot say."""
        return None

    def probe_variables(self, ids: np.ndarray,
                        labels: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Variables a linear probe should find, per example and position: name -> (n, pos)
        int64, -1 where the variable is undefined (padding, or a position it does not live
        at). Default [ours]: `output`, the scored label at each scored position (needs
        `labels` (n, pos)); no labels, no variables."""
        if labels is None:
            return {}
        labels = np.asarray(labels, dtype=np.int64)  # signed before it meets -1
        return {"output": np.where(labels == IGNORE, -1, labels)}

    def attention_targets(self, ids: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """"Where should a head look" targets: name -> (query (n, pos) bool, keys (n, pos)
        bool, or (n, pos, pos) bool when each query row has its own keys). The circuits
        analysis scores the attention mass from the query positions onto the keys. Default:
        none."""
        return {}

    def operands(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(x (n,), y (n,)): the two operand values each sequence's answer is computed from,
        for tasks that add (or otherwise combine) two values; None where not applicable."""
        return None

    def progress_measures(self) -> ProgressMeasures:
        """Facts for Exoo et al.'s progress measures (see `ProgressMeasures`); default: none."""
        return ProgressMeasures()

    def value_labels(self, pairs: Pairs, values: np.ndarray) -> np.ndarray | None:
        """The causal model's labels (n, width) of each base of `pairs` with the pairs'
        variable set to `values` ((n,) codes of the `value` stratum), for DAS's shuffled
        control (the pairs where another value gives the same output are not scored). Default:
        None, the task's causal model cannot say, and every tested pair is scored."""
        return None

    def pair_roles(self, pairs: Pairs) -> dict[str, np.ndarray]:
        """Token roles of aligned counterfactual pairs, for patching each pair where the role
        sits in its own base sequence rather than at one absolute position: role name ->
        (n,) int64 position per pair, -1 where the pair has no such token. Names come in the
        order tables and charts list them. Default: no roles."""
        return {}

    def roles(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The token roles of sequences `ids` (n, width), the grid the atlas searches a
        variable over: role name -> (n,) int64 position of that role in each sequence, -1
        where the sequence has none. A name is one of `role_names`, alone (one token per
        sequence, e.g. binding's `colon`) or with `@i` for its i-th occurrence (binding's
        `rhs@3`, line 3's right-hand token), in the order of the sequence. Default: none."""
        return {}

    @staticmethod
    def role_of(name: str) -> str:
        """The role family of a `roles` name: `rhs@3` -> `rhs`."""
        return name.split("@", 1)[0]

    def stratum_label(self, name: str, value) -> str:
        """How a stratum value reads in tables: `name=value` ("depth=3")."""
        return f"{name}={_plain(value)}"

    # --- identity -----------------------------------------------------------------------
    def fingerprint(self) -> str:
        """Hash of everything that determines the data (the config and the generator version)."""
        blob = json.dumps({"task": self.name, "version": self.version,
                           "config": dataclasses.asdict(self.config)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def cache_dir() -> Path:
    return Path(os.environ.get("STUDY_CACHE", Path.home() / ".cache" / "study"))


def _checksum(ex: Examples) -> str:
    h = hashlib.sha256()
    for name, arr in [("ids", ex.ids), ("labels", ex.labels), *sorted(ex.strata.items())]:
        arr = np.ascontiguousarray(arr)
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _cache_problem(z, task: Task, split: str, ex: Examples) -> str | None:
    """Why a cache file must not be trusted for (task, split), or None. The file records the
    task fingerprint, split, shapes and a checksum, so a file copied over from another split
    or config, or altered, is caught rather than trained on."""
    if "meta" not in z.files:
        return "it has no record of what it holds"
    meta = json.loads(str(z["meta"]))
    if meta.get("fingerprint") != task.fingerprint() or meta.get("split") != split:
        return (f"it holds split {meta.get('split')!r} of task config {meta.get('fingerprint')}, "
                f"not {split!r} of {task.fingerprint()}")
    shapes = {"ids": list(ex.ids.shape), "labels": list(ex.labels.shape),
              **{f"strata_{k}": list(v.shape) for k, v in ex.strata.items()}}
    if meta.get("shapes") != shapes:
        return "its array shapes differ from its record"
    if meta.get("checksum") != _checksum(ex):
        return "its checksum does not match its contents"
    return None


def _disk_cached(task: Task, split: str) -> Examples:
    """Datasets are cached on disk keyed by a hash of their config; written atomically, and
    checked on load (fingerprint, split, shapes, checksum) so a wrong file is regenerated."""
    path = cache_dir() / "datasets" / f"{task.name}-{task.fingerprint()}-{split}.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                strata = {k[7:]: z[k] for k in z.files if k.startswith("strata_")}
                ex = Examples(z["ids"], z["labels"], strata)
                problem = _cache_problem(z, task, split, ex)
        except Exception as e:  # a corrupt cache file is regenerated, never trusted
            problem = f"it is unreadable ({type(e).__name__})"
        if problem is None:
            return ex
        _log.info(f"notice: regenerating dataset cache {path}: {problem}")
        path.unlink(missing_ok=True)
    ex = task.generate(split)
    meta = {"fingerprint": task.fingerprint(), "split": split, "checksum": _checksum(ex),
            "shapes": {"ids": list(ex.ids.shape), "labels": list(ex.labels.shape),
                       **{f"strata_{k}": list(v.shape) for k, v in ex.strata.items()}}}
    from study.core.atomic import atomic_path
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file: np.savez adds no suffix
            np.savez(f, ids=ex.ids, labels=ex.labels, meta=np.array(json.dumps(meta)),
                     **{f"strata_{k}": v for k, v in ex.strata.items()})
    except OSError as e:  # a read-only or full cache only costs regenerating next time
        _log.info(f"notice: could not write dataset cache {path} ({e.strerror}); continuing "
                  f"without it")
    return ex
