"""The run handle: one object opens a run directory, whatever opens it (the `analyze`,
`compare` and `report` commands, the end of a sweep, and Python users).

    import study
    run = study.open_run("runs/counting-gru-s0-1a2b3c4d")
    iv = run.intervenable("up_down:count")            # a pyvene.IntervenableModel, trained OAF
    pairs = run.pairs("up_down:count")                # the das analysis's test pairs
    study.iia(iv, pairs)                              # the das table's test iia, through pyvene

`open_run(path)` -> `Run`: `.config` (the resolved `RunConfig`), `.task`,
`.model(checkpoint, device)`, `.checkpoints`, `.metrics`, `.summary`, `.table(name)`,
`.run_tables` (the torch-free view reports read), `.analysis_configs(names)`,
`.settings(analysis)`, `.pairs(variable, split, n, analysis="das")`, `.alignment(...)`, `.intervenable(...)`,
`.cache(inputs, sites)` (logits and every site's activations, attention patterns included),
`.tokenizer()` and `.to_transformers(checkpoint)` (TransformerLens and nnsight recipes:
docs/interop.md). `open_runs(paths)` opens several (each once). Everything a run
directory lacks or holds damaged is one `UsageError` naming the file or key, as on the
command line.

Reopening a run uses the pieces every command builds a run from (`study/run/build.py`): its
task (`build_task`, which training calls too), the device (`resolve_device`), and a checkpoint
frozen in eval mode (`Run.model`, through `frozen`). Nothing here imports torch until a network is asked
for, so `import study` stays light.
"""
from __future__ import annotations

from functools import cached_property

from study.core.alignments import REFERENCE, file_key
from study.core.errors import UsageError
from study.run.build import build_task, frozen

# what a checkpoint's meta.json must name to rebuild its network
META_KEYS = ("model", "model_config", "vocab_size", "seq_len", "step")


def open_run(path) -> "Run":
    """The run directory at `path` (one `python -m study run` wrote)."""
    return Run(path)


def open_runs(paths) -> list["Run"]:
    """Several run directories, each opened once, in the order given."""
    from study.claims.runs import unique_paths
    runs = [Run(p) for p in unique_paths(paths)]
    if not runs:
        raise UsageError("open_runs needs at least one run directory")
    return runs


def special_tokens(task) -> dict:
    """The special tokens of a task's tokenizer (`Run.tokenizer`), each a token of its
    vocabulary or None: pad = the task's PAD; bos / eos = the task's own sequence delimiters
    where it has them (counting: every sequence opens with B and closes with E [paper]),
    else None (binding and assign_add have none), never an ordinary token."""
    alphabet = getattr(task, "alphabet", None)
    return {"pad": task.vocab[task.pad_id], "bos": getattr(alphabet, "bos", None),
            "eos": getattr(alphabet, "eos", None)}


class Run:
    """One run directory. Reads lazily: opening one looks only for its config.json."""

    def __init__(self, path):
        from study.core.rundir import RunDir
        from study.claims.runs import run_path

        self.path = run_path(path)  # one-line UsageError for a path that is no run
        self.rundir = RunDir(self.path)

    def __repr__(self) -> str:
        t = self.run_tables
        return f"Run({str(self.path)!r}: {t.task} x {t.model}, seed {t.seed}, {t.status})"

    # --- what the directory says ---------------------------------------------------------

    @cached_property
    def run_tables(self):
        """The run's files as reports read them (`study.claims.runs.RunTables`; no torch)."""
        from study.claims.runs import load_run
        return load_run(self.path)

    @cached_property
    def config(self):
        """The run's resolved configuration (`study.run.config.RunConfig`); a one-line error when
        config.json has the wrong shape."""
        from study.run.config import from_dict
        try:
            return from_dict(self.rundir.config(), f"{self.path}/config.json")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UsageError(f"{self.rundir.config_path} is damaged ({type(e).__name__}: {e}); "
                             "delete it and re-run the `run` command that made this run") from None

    @property
    def status(self) -> str:
        return self.run_tables.status

    @property
    def summary(self) -> dict:
        return self.run_tables.summary

    @property
    def metrics(self):
        """Training metrics, long format: step, split, stratum, metric, value."""
        if self.run_tables.metrics is None:
            raise UsageError(f"{self.path / 'metrics.parquet'} is missing: training writes it; "
                             f"this run has not logged any metrics yet")
        return self.run_tables.metrics

    def tables(self) -> list[str]:
        """Names of the analysis tables the run holds."""
        return sorted(self.run_tables.tables)

    def table(self, name: str):
        """An analysis table (every analysed checkpoint) as a DataFrame."""
        if name not in self.run_tables.tables:
            have = ", ".join(self.tables()) or "none"
            raise UsageError(f"table {name!r} is not in {self.path / 'analyses'} (tables: "
                             f"{have}); run `python -m study analyze {self.path} analysis=...`")
        return self.run_tables.tables[name]

    @property
    def checkpoints(self) -> list[int]:
        """Steps of the logged checkpoints, ascending."""
        from study.train.checkpoint import list_checkpoints
        return list_checkpoints(self.path)

    def step(self, checkpoint="final") -> int:
        """The step of a logged checkpoint ("final" = the last)."""
        from study.train.checkpoint import read_meta, resolve_step
        return int(read_meta(resolve_step(self.path, checkpoint))["step"])

    def analysis_configs(self, names, overrides: dict[str, str] | None = None) -> dict:
        """name -> resolved config of each analysis, for this run's scale, task and model, with
        `overrides` ("das.k": "1,2") applied; every setting checked before any work."""
        from study.run.config import analysis_configs
        from study.core import registry
        cfg = self.config
        have = tuple(p.name for p in sorted(self.path.glob("analyses/[!.]*"))
                     if any(p.glob("*.parquet")))  # analyses whose tables the run holds
        return analysis_configs(tuple(names), cfg.scale, dict(overrides or {}),
                                registry.get("task", cfg.task), registry.get("model", cfg.model),
                                cfg.model_config, have)

    # --- networks and pairs ----------------------------------------------------------------

    @cached_property
    def task(self):
        """The task the run trained on, rebuilt from its config."""
        return build_task(self.config)

    def model(self, checkpoint="final", device="cpu"):
        """The network at a logged checkpoint ("final" = the last) on `device`, in eval mode
        with its parameters frozen, as the analyses see it."""
        from study.train.checkpoint import META, load_model, resolve_step
        ckpt = resolve_step(self.path, checkpoint)
        self.rundir.read_json(str(ckpt.relative_to(self.path) / META), META_KEYS,
                              f"delete {ckpt} to fall back to an earlier checkpoint, or re-run "
                              f"with force=true")
        net, _ = load_model(self.path, checkpoint)
        return frozen(net, device)

    def cache(self, inputs, sites=None, checkpoint="final", device="cpu"):
        """(logits, acts): one forward of the network at `checkpoint` on `inputs`, with the
        activation at every site (`sites=None`) or at the named ones, as
        TransformerLens's `run_with_cache` returns them.

        inputs: a prompt string of the task's tokens separated by spaces ("B D0 D1 T"), a
          list of such strings, a list of token lists, or an integer id tensor / array
          (batch, pos); prompts of unequal length are right-padded with the task's PAD.
        sites: a site name or a list of them, e.g. "resid[1]", "attn_out[0]", "mlp_out[1]",
          "head[0]", "pattern[0]" (attention probabilities), "state" (recurrent networks).
        Returns logits (batch, pos, vocab) and {name: tensor}: resid/attn_out/mlp_out
        (batch, pos, d_model), head (batch, pos, n_heads * d_head), pattern (batch, n_heads,
        query, key), state (batch, pos, d_state); shapes and meaning in
        `study.models.sites.cache`. A site name or token the run lacks is a one-line
        `UsageError` listing the allowed ones."""
        from study.models.sites.cache import input_ids, run_with_cache

        key = (self.step(checkpoint), str(device))
        nets = self.__dict__.setdefault("_cache_nets", {})  # loaded once per checkpoint
        if key not in nets:
            nets[key] = self.model(key[0], device)
        net = nets[key]
        max_pos = net.seq_len if "learned_positions" in net.capabilities else None
        ids = input_ids(inputs, self.task.vocab, self.task.pad_id, device, max_pos)
        return run_with_cache(net, ids, sites)

    def tokenizer(self):
        """A `transformers.PreTrainedTokenizerFast` of the task's vocabulary (id = the task's
        id): a prompt is the tokens separated by spaces, so `tokenizer("B D0 T").input_ids`
        are the ids the network reads; special tokens from `special_tokens(task)`, nothing added
        around a prompt, padding on the right; a word outside the vocabulary becomes PAD (the
        network has no unknown token), where `cache` refuses it (`study/models/tokenizer.py`)."""
        from study.models.tokenizer import task_tokenizer
        return task_tokenizer(self.task.vocab, **special_tokens(self.task))

    def to_transformers(self, checkpoint="final", attn_implementation: str = "eager"):
        """The network as a `transformers.GPTNeoXForCausalLM` with equal logits (the rotary
        transformers gpt12 and rope2), its pad/bos/eos ids the `tokenizer()`'s.
        `save_pretrained(dir)` writes it and the tokenizer offline, for
        `AutoModelForCausalLM` / `AutoTokenizer.from_pretrained(dir)`. Attention is "eager"
        (kept in config.json), so `output_attentions=True` returns the patterns; "sdpa"
        exports the fused kernel."""
        from study.models.nets.gpt_neox import to_gpt_neox
        return to_gpt_neox(self.model(checkpoint), self.tokenizer(), attn_implementation)

    @cached_property
    def das_config(self):
        """The das analysis's settings for this run (recorded, or its scale's preset)."""
        return self.settings("das")

    def settings(self, analysis: str):
        """An analysis's settings for this run: those its tables were made with (recorded in
        config.json), else its scale's preset."""
        recorded = self.config.analysis_configs
        return recorded[analysis] if analysis in recorded else self.analysis_configs((analysis,))[analysis]

    def pairs(self, variable: str, split: str | None = None, n: int | None = None,
              seed: int | None = None, analysis: str = "das"):
        """Counterfactual pairs of a causal variable or counterfactual kind (`study.tasks.base.Pairs`).
        Defaults are those of `analysis`, so that they are the pairs it scored: "das": split
        test, n = das.n_test (test) or das.n_train (other splits), seed = the run's seed +
        das.seed; "patching": its split, n = patching.n_pairs, seed = the run's seed +
        patching.seed."""
        if analysis == "patching":
            cfg = self.settings("patching")
            split = cfg.split if split is None else split
            n = cfg.n_pairs if n is None else n
            seed = self.config.seed + cfg.seed if seed is None else seed
        elif analysis != "das":
            raise UsageError(f"pairs: analysis={analysis!r}; choose from das, patching")
        split = "test" if split is None else split
        task = self.task
        known = tuple(dict.fromkeys((*task.causal_variables, *task.counterfactual_kinds)))
        if variable not in known:
            raise UsageError(f"pairs: {variable!r} is not a causal variable or counterfactual "
                             f"kind of {task.name}; choose from {', '.join(known)}")
        if split not in task.splits:
            raise UsageError(f"pairs: split={split!r} is not a split of {task.name}; choose "
                             f"from {', '.join(task.splits)}")
        das = self.das_config
        n = (das.n_test if split == "test" else das.n_train) if n is None else int(n)
        seed = self.config.seed + das.seed if seed is None else int(seed)
        return task.counterfactuals(variable, n, split=split, seed=seed)

    # --- the das alignments ------------------------------------------------------------------

    def _redo(self, step: int) -> str:
        return f"run `python -m study analyze {self.path} analysis=das checkpoint={step}`"

    def _das_rows(self, variable: str, alignment: str, step: int):
        das = self.table("das")
        rows = das[(das["variable"] == variable) & (das["alignment"] == alignment)
                   & (das["checkpoint"] == step)]
        if rows.empty:
            have = sorted(das.loc[das["checkpoint"] == step, "variable"].unique())
            steps = sorted(int(s) for s in das["checkpoint"].unique())
            if step not in steps:
                raise UsageError(f"das was not run at checkpoint {step} of {self.path} (its "
                                 f"table has {', '.join(map(str, steps))}); {self._redo(step)}")
            raise UsageError(f"the das table of {self.path} has no {alignment!r} rows for "
                             f"{variable!r} at checkpoint {step} (variables: "
                             f"{', '.join(have) or 'none'})")
        return rows

    def alignment(self, variable: str, alignment: str = REFERENCE, k: int | None = None,
                  site: str | None = None, checkpoint="final"):
        """A trained DAS alignment (a pyvene intervention of `study.analyses.das.alignment`) and
        where it acts: (intervention, kind, layer, position). k=None: the smallest k whose
        training-split IIA is within 0.01 of the best. site: a label such as "state", "resid[1]",
        "resid[3]@17"; None when the das table has one site for the variable."""
        from study.analyses.compare.paired import SiteRef
        from study.analyses.das import ALIGNMENTS
        from study.analyses.das.alignment import load_alignment
        from study.analyses.das.export import chosen_k
        from study.core.sites import site_key
        from study.analyses.subspaces.geometry import alignment_files
        from safetensors import safe_open

        if alignment not in ALIGNMENTS:
            raise UsageError(f"alignment={alignment!r}: choose from {', '.join(ALIGNMENTS)}")
        step = self.step(checkpoint)
        rows = self._das_rows(variable, alignment, step)
        labels = sorted({site_key(r.site, int(r.layer), int(r.position))
                         for r in rows.itertuples()})
        if site is None:
            if len(labels) > 1:
                raise UsageError(f"{variable!r} was aligned at several sites "
                                 f"({', '.join(labels)}); give site=")
            ref = SiteRef.parse(labels[0])
        else:
            ref = SiteRef.parse(site)
            if site_key(ref.kind, ref.layer, ref.position) not in labels:
                raise UsageError(f"site={site!r}: {variable!r} was aligned at "
                                 f"{', '.join(labels)}")
        label = site_key(ref.kind, ref.layer, ref.position)
        at = rows[(rows["site"] == ref.kind) & (rows["layer"] == ref.layer)
                  & (rows["position"] == ref.position) & (rows["split"] == "train")]
        by_k = {int(r.k): float(r.iia) for r in at.itertuples()}
        if k is None:
            k = chosen_k(by_k)
            if k is None:
                raise UsageError(f"no k of {alignment} for {variable!r} at {label} has an IIA "
                                 f"(too few changed pairs); give k= (trained: "
                                 f"{', '.join(map(str, sorted(by_k)))})")
        elif int(k) not in by_k:
            raise UsageError(f"k={k}: {alignment} for {variable!r} at {label} was trained at "
                             f"k = {', '.join(map(str, sorted(by_k)))}")
        for f in sorted((self.path / "analyses" / "das").glob("alignments*.safetensors")):
            try:  # a damaged file is named, not a safetensors traceback
                with safe_open(str(f), framework="pt") as h:
                    h.metadata()
            except Exception as e:
                raise UsageError(f"{f} cannot be read ({type(e).__name__}); "
                                 f"{self._redo(step)}") from None
        files = [p for s, p in alignment_files(self.path) if s == step]
        if not files:
            raise UsageError(f"no das alignments file of checkpoint {step} in "
                             f"{self.path / 'analyses' / 'das'}; {self._redo(step)}")
        key = file_key(alignment, variable, label, k)
        try:
            with safe_open(str(files[0]), framework="pt") as f:
                found = key in f.keys()
            inst = load_alignment(files[0], key) if found else None
        except Exception as e:  # safetensors raises its own types for a damaged file
            raise UsageError(f"{files[0]} cannot be read ({type(e).__name__}); "
                             f"{self._redo(step)}") from None
        if inst is None:
            raise UsageError(f"{files[0]} holds no alignment {key!r} (every restart was "
                             f"refused, or the file belongs to another analysis)")
        return inst, ref.kind, ref.layer, ref.position

    def intervenable(self, variable: str, alignment: str = REFERENCE, k: int | None = None,
                     site: str | None = None, checkpoint="final", device="cpu"):
        """A `pyvene.IntervenableModel` over the run's network at `checkpoint` holding the
        trained alignment (`alignment` for its arguments). `study.iia(iv, run.pairs(variable))`
        gives the das table's test IIA; `study.interchange(iv, pairs)` runs it on any pairs."""
        from study.models.sites.pyvene_bridge import judge_with, place, site_intervenable

        inst, kind, layer, position = self.alignment(variable, alignment, k, site, checkpoint)
        net = self.model(checkpoint, device)
        iv = place(site_intervenable(net, kind, layer, inst.to(device)), position)
        # `iia` scores over the task's output ids, as training does, in the das batches
        return judge_with(iv, self.das_config.eval_batch_size, self.task)


def pyvene_view(net):
    """What pyvene wraps for one of our networks (the network, with the `.config` pyvene
    reads), registered with pyvene: pass it to `pyvene.IntervenableModel.load`."""
    from study.models.sites.pyvene_bridge import register
    return register(net)


def load_intervenable(directory, model):
    """A saved `pyvene.IntervenableModel` (the das analysis writes them under
    RUN/analyses/das/pyvene/) rebuilt over `model` (e.g. `run.model()`), quietly, ready for
    `iia`."""
    from study.models.sites.pyvene_bridge import load_intervenable as load
    return load(directory, model)


def iia(iv, pairs, *, all_pairs: bool = False, batch_size: int | None = None,
        outputs=None) -> float:
    """Interchange-intervention accuracy of an intervenable over our sites on `pairs`: the
    share of the pairs that test the intervention (the network itself gives the base label on
    the base and not the counterfactual one) whose every scored output becomes the
    counterfactual one — the das table's `iia`; `all_pairs=True`: over all pairs (its
    `iia_all`). Source vectors are read once, then every base runs through `iv`.
    `outputs`: the task whose output ids decide right and wrong. The defaults of the position
    the pairs are judged at, `batch_size` and `outputs` are the intervenable's placement
    (`study.models.sites.pyvene_bridge.where`; `place` and `judge_with` set them): for one from
    `Run.intervenable` the alignment's position, the das batches and the run's task, else the
    pairs' own positions, 1000 and every token."""
    from study.analyses.common.interchange import judged, pair_tensors
    from study.analyses.common.stats import changed_iia
    from study.analyses.das import pairs_right
    from study.models.sites.pyvene_bridge import where
    from study.models.sites.capture import device_of, gather_site

    at = where(iv)
    net = iv.model.net
    bs = int(batch_size or at.batch_size)
    outputs = outputs if outputs is not None else at.outputs
    pt = judged(net, pair_tensors(pairs, device_of(net), at.position, outputs), bs)
    src = gather_site(net, pt.source_ids, at.kind, at.layer, pt.source_pos, bs)
    right = pairs_right(iv, pt, src, bs).cpu().numpy()
    if all_pairs:
        return float(right.mean())
    return changed_iia(right, pt.tests.cpu().numpy())
