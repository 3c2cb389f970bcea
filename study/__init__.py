"""study: comparative mechanistic interpretability of small networks on synthetic tasks.

From Python (`study/api.py`; imported on first use, so `import study` stays light):

    import study
    run = study.open_run("runs/counting-gru-s0-1a2b3c4d")
    iv = run.intervenable("up_down:count")     # pyvene.IntervenableModel, trained alignment
    study.iia(iv, run.pairs("up_down:count"))  # the das table's test IIA
"""

__version__ = "0.1.0"

_API = ("open_run", "open_runs", "Run", "iia", "pyvene_view", "load_intervenable")
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        from study import api
        return getattr(api, name)
    raise AttributeError(f"module 'study' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
