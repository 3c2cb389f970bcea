"""Per-command help: `python -m study COMMAND --help` prints the command's forms, its keys
with their defaults, and one example. Where the command's settings depend on a task, model or
scale (`run`, `sample`, `describe`), the keys given beside `--help` (`run task=counting
model=gru scale=smoke --help`) add every field of those groups at the scale the command would
use; `describe` prints the same values (`field_lines`).

Nothing here imports torch: help answers at once."""
from __future__ import annotations

from dataclasses import dataclass

from study.core import registry
from study.core.errors import UsageError
from study.core.settings import describe_fields, fixed_fields


@dataclass(frozen=True)
class Help:
    forms: tuple[str, ...]  # the command's usage lines
    keys: tuple[tuple[str, str, str], ...]  # (key, default, what it does)
    example: str
    scale: str | None = None  # the default scale of the command's fields (None: no fields)


_SCALES = " | ".join(registry.SCALES)
_FIELDS = ("task.FIELD, model.FIELD, train.FIELD, ANALYSIS.FIELD", "(scale's preset)",
           "any field; `describe` lists them, and these keys beside --help list them here")
_GROUP_SCALE = ("GROUP.scale", "(scale)", "one group's preset at another scale, e.g. "
                "das.scale=paper")
_RUNTIME = ("runtime.NAME", "(chosen by the code)", "speed only: device, kernels, batching, "
            "time budgets (`describe` lists them)")

HELP = {
    "list": Help(("list",), (), "python -m study list"),
    "describe": Help(
        ("describe task=NAME | model=NAME | analysis=NAME | train=TASK [scale=S]",
         "describe   (the count of settings, and the runtime.* names)"),
        (("task, model, analysis", "", "the registry entry whose fields to list"),
         ("train", "", "a task: the training fields with that task's presets"),
         ("scale", "paper", f"whose preset values are shown ({_SCALES})")),
        "python -m study describe task=counting scale=small"),
    "sample": Help(
        ("sample task=NAME [n=N] [split=S] [seed=S] [scale=S] [task.FIELD=V ...]",),
        (("task", "(required)", "the task to draw from"), ("n", "5", "examples to print"),
         ("split", "train", "the split to draw from (the task's splits)"),
         ("seed", "0", "the task's data seed"), ("scale", "smoke", f"the task's preset ({_SCALES})"),
         ("task.FIELD", "(scale's preset)", "any task field")),
        "python -m study sample task=binding n=2 split=test", scale="smoke"),
    "run": Help(
        ("run task=NAME model=NAME [scale=S] [seed=S] [run_dir=PATH] [analyses=A,B|none] "
         "[GROUP.FIELD=V ...] [force=true] [long=ok]",
         "run study=NAME|PATH [KEY=V ...]   (a study file of one run: study=quickstart)"),
        (("task", "(required)", "task family"), ("model", "(required)", "model family"),
         ("scale", "paper", f"preset of every group ({_SCALES})"),
         ("seed", "0", "training seed (model init, data order)"),
         ("run_dir", "runs/<task>-<model>-s<seed>-<hash8>", "where the run goes"),
         ("analyses", "(the task's standard: patching,das)",
          "analyses to run after training, comma-separated; none = train only"),
         ("study", "(none)", "a study file of one run whose settings the others override"),
         ("force", "false", "retrain a finished run"),
         ("long", "no", "ok: start a CPU run estimated to take over an hour here"),
         _FIELDS, _GROUP_SCALE, _RUNTIME),
        "python -m study run task=counting model=gru scale=small analyses=das,patching",
        scale="paper"),
    "sweep": Help(
        ("sweep KEY=V1,V2 ... [option=V ...]", "sweep study=NAME|PATH.toml [KEY=V ...] [option=V ...]"),
        (("KEY=V1,V2", "", "any run key; comma lists expand into one run per combination"),
         ("study", "", "a study file (demo, counting, laptop, ... or a path)"),
         ("launcher", "local", "local | slurm"), ("jobs", "auto", "runs at once here: auto or N"),
         ("gpus", "auto", "GPUs the runs may use: auto, none or 0,1,..."),
         ("dry_run", "false", "list the runs; run nothing"),
         ("wait", "true", "launcher=slurm: wait for the jobs"),
         ("long", "no", "ok: start a local CPU sweep estimated at over an hour"),
         ("slurm.FIELD", "", "a SLURM job's resources (partition, gpus, cpus, time, ...)"),
         ("compare.FIELD", "", "the comparisons at the sweep's end (site, k, ...)")),
        "python -m study sweep task=counting model=gru,lstm seed=0,1 scale=small analyses=das"),
    "status": Help(
        ("status SWEEP_DIR", "status STUDY", "status KEY=V1,V2 ... (as the sweep was given)"),
        (), "python -m study status demo"),
    "analyze": Help(
        ("analyze RUN_DIR analysis=A[,B] [checkpoint=final|STEP,..|all] [A.FIELD=V ...]",),
        (("analysis", "(required)", "analyses to run, comma-separated (run's key is analyses=)"),
         ("checkpoint", "final", "final, a step, a comma list of steps, or all"),
         ("A.FIELD", "(the run's scale's preset)", "any field of the analysis"),
         ("A.scale", "(the run's scale)", "the analysis's preset at another scale"),
         ("runtime.NAME", "(chosen by the code)", "an analysis's speed-only settings")),
        "python -m study analyze runs/try analysis=patching checkpoint=all"),
    "report": Help(
        ("report RUN_DIR [RUN_DIR ...] [out=DIR] [markdown=true|false]",),
        (("out", "RUN_DIR/report (one run), else report-<hash8> beside the runs",
          "the report's folder"),
         ("markdown", "true", "also write report.md with PNG charts")),
        "python -m study report runs/try out=runs/try-report"),
    "compare": Help(
        ("compare RUN_DIR RUN_DIR ... [out=DIR] [compare.FIELD=V ...]",),
        (("out", "as report's", "the folder its comparisons/ tables go to"),),
        "python -m study compare runs/counting-gru-s0-* runs/counting-lstm-s0-* compare.site=last"),
    "bench": Help(
        ("bench train [task=NAME model=NAME|all scale=S steps=N out=PATH]",
         "bench das [task=NAME model=NAME scale=S steps=N out=PATH]",
         "bench atlas [task=NAME model=NAME scale=S atlas.KEY=V ... measure=N out=PATH]",
         "bench emergence [task=NAME model=NAME scale=S atlas.KEY=V emergence.KEY=V ... "
         "out=PATH]"),
        (("task, model", "(binding x gpt12 for train, counting x gru for das and emergence, "
                         "binding x gru for atlas)", "what to time; model=all: every family "
                         "on its paper's task"),
         ("measure", "0", "atlas: the variables measured (0 = all); the rest projected"),
         ("scale", "paper", f"the preset ({_SCALES})"), ("steps", "30", "timed steps"),
         ("out", "runs/bench/<kind>-<task>-<model>-<time>.md", "the table's file")),
        "python -m study bench train model=all scale=small"),
    "doctor": Help(
        ("doctor [task=NAME model=NAME scale=S seed=S train.FIELD=V ...] [seconds=N]",),
        (("task, model, scale", "(binding x gpt12 at paper on a GPU, counting x gru at small "
                                "on a CPU)", "the run whose settings and speed to probe"),
         ("seconds", "10", "length of the tokens/s probe (0: none)")),
        "python -m study doctor task=counting model=gru scale=small"),
    "gpu-check": Help(
        ("gpu-check out=DIR [device=cuda|cpu] [quick=true] [scale=S] [work=DIR] [only=ITEM,..]",),
        (("out", "(required)", "a new or empty folder for the summary, the log and the archive"),
         ("device", "cuda", "cuda, or cpu to check the path without a GPU"),
         ("quick", "false", "one run per family instead of the whole grid"),
         ("scale", "paper (smoke with quick=true)", "the runs' preset"),
         ("work", "a temporary folder", "where the runs go"),
         ("only", "every item", "the items to run")),
        "python -m study gpu-check out=gpu-check device=cpu quick=true"),
    "results": Help(
        ("results SWEEP_DIR|STUDY [out=DIR]",),
        (("out", "results/<study>-<date>", "the result folder: tables and manifest.json"),),
        "python -m study results demo"),
    "reproduce": Help(
        ("reproduce RESULT_DIR [work=DIR | against=RESULT_DIR]",),
        (("work", "a temporary folder", "where the study is rerun"),
         ("against", "none", "a result folder made elsewhere, compared instead of a rerun")),
        "python -m study reproduce results/demo-2026-12-06"),
    "results-docs": Help(
        ("results-docs [check=true]",),
        (("check", "false", "true: rewrite nothing, exit 1 where a docs table differs"),),
        "python -m study results-docs check=true"),
}


def field_lines(cls, prefix: str, presets: dict, scale: str, with_help: bool = True) -> list[str]:
    """One line per setting of `cls`: its type and its value at `scale` (the preset, else the
    field's default), the other scales' presets in brackets, and its declared help; the
    speed-only ones last, spelt `runtime.NAME`, and the values the code holds fixed after."""
    infos = describe_fields(cls)
    values = {i.name: presets.get(scale, {}).get(i.name, i.default) for i in infos}
    out = []
    for f in [i for i in infos if not i.runtime] + [i for i in infos if i.runtime]:
        value = values[f.name]
        per_scale = "; ".join(f"{s}: {presets[s][f.name]!r}" for s in registry.SCALES
                              if f.name in presets.get(s, {}))
        key = f"runtime.{f.runtime}" if f.runtime else f"{prefix}{f.name}"
        out.append(f"  {key} ({f.type}) = {value!r}"
                   + (f"  [{per_scale}]" if per_scale else "")
                   + (f"\n      {_resolved(f.help, values)}" if f.help and with_help else ""))
    fixed = fixed_fields(cls)
    if fixed and with_help:
        made = cls()  # a derived value as the defaults give it
        out.append("  fixed by the code (recorded with the run, not settings): "
                   + ", ".join(f"{n} = {getattr(made, n)!r}" for n in fixed))
    return out


def _resolved(text: str, values: dict) -> str:
    """A help text with `{field}` replaced by that field's value at the scale shown, so that
    a number it quotes follows the preset (binding's `{n_letters} x 10` combinations)."""
    if "{" not in text:
        return text
    try:
        return text.format_map(values)
    except (KeyError, IndexError, ValueError):
        return text


def command_help(command: str, args: list[str]) -> str:
    """The help of one command; `args` (the other words given with --help) may name a task,
    model, scale or analyses whose fields are listed at that scale."""
    h = HELP[command]
    lines = ["usage: " + h.forms[0], *("       " + f for f in h.forms[1:])]
    if h.keys:
        lines += ["", "keys:"]
        for key, default, what in h.keys:
            left = (f"{key}={default}" if default and not default.startswith("(")
                    else f"{key} {default}".rstrip())
            lines.append(f"  {left:<26}  {what}" if len(left) <= 26
                         else f"  {left}\n  {'':<26}  {what}")
    if h.scale is not None:
        lines += _fields(command, args, h.scale)
    if command in ("compare", "sweep"):  # fields with no per-scale presets
        from study.analyses.compare import CompareConfig
        lines += ["", "compare.FIELD, with its default:",
                  *field_lines(CompareConfig, "compare.", {}, "paper", with_help=False)]
    if command == "sweep":
        from study.sweep.options import SlurmConfig
        lines += ["", "slurm.FIELD, with its default:",
                  *field_lines(SlurmConfig, "slurm.", {}, "paper", with_help=False)]
    lines += ["", "example:", "  " + h.example]
    return "\n".join(lines) + "\n"


def _fields(command: str, args: list[str], default_scale: str) -> list[str]:
    """The fields of the task, model and analyses named beside --help, at the scale given
    there or the command's default."""
    kv = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    scale = kv.get("scale", default_scale)
    if scale not in registry.SCALES:
        raise UsageError(f"scale={scale!r} is not a scale; choose from {', '.join(registry.SCALES)}")
    from study.train.config import TrainConfig
    groups = []
    if "task" in kv:
        entry = registry.get("task", kv["task"])
        groups.append(("task.", entry.config, entry.presets))
        if command != "sample":
            groups.append(("train.", TrainConfig, entry.obj.train_presets))
    if "model" in kv and command != "sample":
        entry = registry.get("model", kv["model"])
        groups.append(("model.", entry.config, entry.presets))
    for name in (a for a in kv.get("analyses", "").split(",") if a):
        entry = registry.get("analysis", name)
        groups.append((f"{entry.prefix}.", entry.config, entry.presets))
    if not groups:
        return ["", "task=NAME, model=NAME (and scale=, analyses=) beside --help list their "
                    f"fields here, at scale={scale} unless given"]
    out = ["", f"fields at scale={scale}:"]
    for prefix, cls, presets in groups:
        out += field_lines(cls, prefix, presets, scale, with_help=False)
    return out
