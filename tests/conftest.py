"""Shared test set-up: datasets and runs go to a per-session temporary cache."""
import contextlib
import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Small models on a CPU run fastest on one intra-op thread; more threads only contend (one
# pytest worker runs per core). So do the command lines the tests start.
torch.set_num_threads(1)
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

ROOT = Path(__file__).resolve().parent.parent


# The files that take longest, started first: with `--dist loadfile` (`make test`) a file runs
# on one worker from start to end, so a long file started last keeps the other workers idle
# while it finishes. One order for each tier (`make test`, `make test-slow`), its longest
# files first as measured on 2 cores; a file in neither runs after them, in path order.
LONG_FIRST = {
    "slow": ("tests/test_registry_grid.py", "tests/run/test_faults.py", "tests/train/test_gpu_path.py",
             "tests/sweep/test_slurm.py", "tests/test_readme.py", "tests/sweep/test_sweep.py",
             "tests/sweep/test_studies.py", "tests/checks/test_gpu_check.py", "tests/test_examples.py",
             "tests/sweep/test_results.py", "tests/core/test_rundir_safety.py",
             "tests/train/test_resume_fallback.py", "tests/run/test_nothing_missing.py",
             "tests/reports/test_compare_sections.py", "tests/run/test_runner.py",
             "tests/analyses/test_das_batched.py", "tests/sweep/test_launch_and_analyze.py",
             "tests/reports/test_sections.py"),
    # the first two build the runs other files share (the report tests' smoke runs, the
    # trained counting GRU), each on its own worker, while the files after them need neither
    "fast": ("tests/reports/test_compare_sections.py", "tests/run/test_nothing_missing.py",
             "tests/analyses/test_device.py", "tests/sweep/test_launch_and_analyze.py",
             "tests/analyses/test_das_resume.py", "tests/analyses/test_das_batched.py",
             "tests/test_toy_model.py", "tests/checks/test_doctor.py",
             "tests/sweep/test_out_folders.py", "tests/train/test_resume_fallback.py",
             "tests/core/test_rundir_safety.py", "tests/test_cli.py", "tests/test_code_map.py",
             "tests/sweep/test_results.py", "tests/reports/test_report_output.py"),
}


def pytest_configure(config):
    """pytest-xdist queues a `--dist loadfile` session's files by their number of tests, most
    first, unless told not to: that order would undo LONG_FIRST (a long file of few tests
    would start last), so the files keep the order of the collection."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    tier = "fast" if "not slow" in (config.getoption("markexpr") or "") else "slow"
    rank = {path: i for i, path in enumerate(LONG_FIRST[tier])}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable
    import torch
    if not torch.cuda.is_available():  # the slow tier selects `gpu` tests: skipped, saying why
        skip = pytest.mark.skip(reason="needs a CUDA device (none visible)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _library_lines_on_stderr():
    """What the library logs under `study` shows on stderr, as the command line shows it."""
    from study.core.logs import to_terminal
    to_terminal()


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("study-cache")
    old = os.environ.get("STUDY_CACHE")
    os.environ["STUDY_CACHE"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("STUDY_CACHE", None)
    else:
        os.environ["STUDY_CACHE"] = old


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run `python -m study ARGS` in a subprocess (environment `env`, this one's by default);
    returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "study", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout,
                          env={**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)})


def cli_here(capsys):
    """`call(*args)`: `study ARGS` run in this process; its exit code, stdout and stderr, as
    `run_cli` gives a process's (the process's own start and imports left out)."""
    from types import SimpleNamespace

    from study.cli import main

    def call(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)
    return call


def frozen_smoke_model(task_name, model_name):
    """(task, model, model entry) at scale=smoke, seed 0, eval mode, parameters frozen."""
    from study.models.base import build_model
    from study.core.registry import get

    te, me = get("task", task_name), get("model", model_name)
    task = te.obj(te.make_config("smoke"))
    torch.manual_seed(0)
    model = build_model(me, me.make_config("smoke"), len(task.vocab), task.seq_len).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return task, model, me


@contextlib.contextmanager
def built_once(tmp_path_factory, name: str):
    """Inside: a directory `name` that every worker of a parallel session (pytest-xdist)
    shares, held under an exclusive lock: the first worker builds runs there, the others wait
    and find them finished (a rerun of a finished run is skipped). Tests that change a run
    copy it first. Without xdist, a directory of this session."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's root, above each worker's own
    root = base / name
    root.mkdir(exist_ok=True)
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# A trained counting network with das and patching, in seconds: a smaller count range (1-6,
# 5 held out) than the paper's, so 200 updates reach full test accuracy at smoke scale [ours].
TRAINED_COUNTING = {"task": "counting", "scale": "smoke", "task.max_count": "6",
                    "task.held_out": "5", "train.steps": "200", "train.lr": "0.01"}
SMALL_DAS = {"analyses": "das,patching", "das.variables": "up_down:count",
             "das.controls": "false", "das.restarts": "1", "das.steps": "60", "das.lr": "0.01",
             "das.k": "1,2", "das.n_train": "256", "das.n_test": "256"}


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory):
    """model name -> a finished run directory of `TRAINED_COUNTING` (recurrent models also
    with `SMALL_DAS`), trained on first use and shared by the session."""
    from study.run.config import resolve
    from study.run.runner import run

    made = {}

    def get(model: str) -> Path:
        if model not in made:
            extra = SMALL_DAS if model in ("gru", "lstm") else {}
            with built_once(tmp_path_factory, "trained-runs") as root:
                cfg = resolve({**TRAINED_COUNTING, **extra, "model": model,
                               "run_dir": str(root / f"counting-{model}")})
                made[model] = run(cfg).path
        return made[model]

    return get


@contextlib.contextmanager
def step_loop(model):
    """Inside: a recurrent network runs its Python step loop (a global no-op module hook
    watches every module call, which only the loop serves); other networks run as always."""
    from torch.nn.modules.module import register_module_forward_hook

    handle = register_module_forward_hook(lambda _m, _a, y: None)
    try:
        yield model
    finally:
        handle.remove()


@contextlib.contextmanager
def same_cuts(model, steps):
    """Inside: a recurrent network runs as under an intervention at the state steps `steps`
    (identity hooks there), so its fused kernel is cut at the same steps and a clean run is
    bitwise comparable with the intervened one. Other networks run as always."""
    sites = getattr(getattr(model, "sites", None), "state", None)
    handles = [sites[int(t)].register_forward_hook(lambda _m, _a, y: y)
               for t in sorted(set(int(t) for t in steps))] if sites else []
    try:
        yield model
    finally:
        for h in handles:
            h.remove()


def project_entries(kind: str) -> dict:
    """The registry's entries of `kind` that the project ships. Every test file is imported
    when the suite is collected, so the entries some test files register (a toy task, a fake
    network) are in the registry for every test of the session; a property of the project's
    own tasks, models and analyses is checked over these."""
    from study.core import registry

    return registry.builtin(kind)


def report_charts(page) -> dict[str, list[dict]]:
    """Figure key -> the rows its chart draws, read back from the Vega-Lite specs a report's
    HTML page embeds (what a reader of the page is shown)."""
    import json
    import re

    specs = re.findall(r'class="vl-spec" data-for="([^"]+)">(.*?)</script>',
                       Path(page).read_text(), flags=re.S)
    return {key: [row for rows in json.loads(text).get("datasets", {}).values() for row in rows]
            for key, text in specs}
