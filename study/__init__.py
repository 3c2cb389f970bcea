"""study: comparative mechanistic interpretability of small networks on synthetic tasks.

From Python (`study/run/handle.py`; imported on first use, so `import study` stays light):

    import study
    run = study.open_run("runs/try")                     # the README's quick start makes it
    run = study.find_run(task="counting", model="gru")   # or: the best trained one under runs/
    iv = run.intervenable("up_down:count")     # pyvene.IntervenableModel, trained alignment
    study.iia(iv, run.pairs("up_down:count"))  # the das table's test IIA
"""

__version__ = "0.1.0"

_API = ("open_run", "open_runs", "Run", "iia", "pyvene_view", "load_intervenable")
# finding a run (`study/run/runs.py`); interventions by hand (`study/run/intervene.py`); the
# similarity measures of the `compare` command (`study/analyses/compare/measures.py`)
_RUNS = ("find_run",)
_INTERVENE = ("site_intervenable", "interchange", "site_vectors", "new_alignment", "all_right",
              "answer_loss", "coordinates", "save_intervenable")
_MEASURES = ("linear_cka", "procrustes_similarity", "shuffled_baseline")
__all__ = ["__version__", *_API, *_RUNS, *_INTERVENE, *_MEASURES]


def __getattr__(name):
    if name in _API:
        from study.run import handle
        return getattr(handle, name)
    if name in _RUNS:
        from study.run import runs
        return getattr(runs, name)
    if name in _INTERVENE:
        from study.run import intervene
        return getattr(intervene, name)
    if name in _MEASURES:
        from study.analyses.compare import measures
        return getattr(measures, name)
    raise AttributeError(f"module 'study' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__[1:])
