"""`scale=small` is the laptop variant each task's page documents, registered once
(`Task.family_presets`) and trained alike by `run` and the study files; `run` without
`analyses=` runs the task's standard analyses, `analyses=none` none."""
import pytest

from study.core.errors import UsageError
from study.run.config import resolve, with_standard_analyses
from study.sweep.plan import parse

FAMILIES = ("gru", "lstm", "gpt12", "rope2", "attn2")


@pytest.fixture(scope="module")
def binding_study():
    plan, _ = parse(["study=binding"])
    return {(r.cfg.model, r.cfg.seed): r.cfg for r in plan.runs}


@pytest.mark.parametrize("model", FAMILIES)
def test_run_at_scale_small_trains_what_the_binding_study_trains(binding_study, model):
    """The same weights (identity, so the same run directory) and the same patching and DAS
    settings as study=binding's run of that family."""
    study = binding_study[(model, 0)]
    run = resolve(with_standard_analyses({"task": "binding", "model": model, "scale": "small"}))
    assert run.identity() == study.identity()
    assert run.default_run_dir() == study.default_run_dir()
    assert run.analyses == ("patching", "das")
    for name in run.analyses:
        assert run.analysis_configs[name] == study.analysis_configs[name], name


def test_the_laptop_gpt12_is_the_documented_one():
    """docs/tasks/binding.md: gpt12 at 1e-3 for 4,500 updates, DAS in resid[1-3] from k = 4."""
    cfg = resolve(with_standard_analyses({"task": "binding", "model": "gpt12", "scale": "small"}))
    assert (cfg.train.lr, cfg.train.steps) == (1e-3, 4500)
    assert cfg.analysis_configs["das"].layers == (1, 2, 3)
    assert cfg.analysis_configs["das"].k == (4, 8, 16)


def test_the_command_line_overrides_the_family_preset_and_other_scales_ignore_it():
    cfg = resolve({"task": "binding", "model": "gpt12", "scale": "small", "train.lr": "3e-3"})
    assert (cfg.train.lr, cfg.train.steps) == (3e-3, 4500)
    paper = resolve({"task": "binding", "model": "gpt12", "train.scale": "paper",
                     "scale": "small"})
    assert (paper.train.lr, paper.train.steps) == (1e-4, 105_400)  # train's own scale: paper
    assert resolve({"task": "binding", "model": "gpt12"}).train.steps == 105_400


def test_a_family_presets_analysis_settings_apply_only_where_the_analysis_runs():
    """gpt12's preset sets das.layers: without das asked it is no error and no setting."""
    cfg = resolve({"task": "binding", "model": "gpt12", "scale": "small", "analyses": "none"})
    assert cfg.analyses == () and cfg.analysis_configs == {}
    cfg = resolve({"task": "binding", "model": "gpt12", "scale": "small",
                   "analyses": "patching"})
    assert set(cfg.analysis_configs) == {"patching"}


@pytest.mark.parametrize("task, das_variables", [
    ("binding", ("root_value", "query", "referent")), ("counting", ("main",)),
    ("assign_add", ("main",))])
def test_run_without_analyses_runs_patching_and_das_on_the_tasks_variables(task, das_variables):
    cfg = resolve(with_standard_analyses({"task": task, "model": "gru", "scale": "smoke"}))
    assert cfg.analyses == ("patching", "das")
    assert cfg.analysis_configs["das"].variables == das_variables
    given = resolve(with_standard_analyses({"task": task, "model": "gru", "scale": "smoke",
                                            "analyses": "probes"}))
    assert given.analyses == ("probes",)


def test_analyses_none_trains_only_and_a_stray_analysis_key_is_still_refused():
    kv = {"task": "counting", "model": "gru", "scale": "smoke", "analyses": "none"}
    assert resolve(with_standard_analyses(kv)).analyses == ()
    with pytest.raises(UsageError, match="das.k given but analysis 'das' is not among"):
        resolve({**kv, "das.k": "1"})


def test_run_takes_a_study_file_of_one_run_under_its_own_settings():
    """`run study=quickstart` (the README's preset): the study's settings, the command line's
    over them; a study of several runs is refused, naming sweep."""
    from study.commands import _one_run
    kv = _one_run({"study": "quickstart", "run_dir": "runs/try", "train.steps": "300"})
    cfg = resolve(with_standard_analyses(kv))
    assert (cfg.task, cfg.model, cfg.scale, cfg.run_dir) == ("counting", "gru", "smoke", "runs/try")
    assert cfg.train.steps == 300 and cfg.analyses == ("das",)
    assert cfg.analysis_configs["das"].k == (1, 2)
    with pytest.raises(UsageError, match="describes 3 runs.*sweep study=demo"):
        _one_run({"study": "demo"})
