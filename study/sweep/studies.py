"""Studies as files: a comparative study is a TOML file of `sweep` settings.

    description = "one line shown by `sweep dry_run=true`"
    [settings]
    task = "counting"
    model = "gru,lstm,rope2"      # comma lists sweep, as on the command line
    "das.k" = "1,2,4"             # a quoted dotted key is one setting
    [settings.runtime]            # a table is a group: runtime.max_minutes
    max_minutes = 2.5

A study of several sweeps (the reproductions of different papers side by side) lists them
as parts; each part's settings go over `[settings]`, and the study's runs are the union:

    [settings]
    scale = "small"
    [[part]]
    task = "binding"
    model = "gpt12"
    [[part]]
    task = "counting"
    model = "gru,lstm"

The values are the defaults of `python -m study sweep study=...`; the command line overrides
them (in every part). Numbers and booleans are written as the command line would (`2.5`, `true`); a list is a
comma list. The predefined studies ship with the package (`study/sweep/studies/NAME.toml`:
`study=demo`); `study=PATH` runs a user's own file. A study's comparative report goes to
`runs/study-NAME/`, NAME being the file's stem.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from study.core.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

STUDY_DIR = Path(__file__).resolve().with_name("studies")
TOP_LEVEL = ("description", "settings", "part")


@dataclass(frozen=True)
class Study:
    name: str  # the file's stem: the report goes to runs/study-NAME
    path: Path
    description: str = ""
    settings: dict[str, str] = field(default_factory=dict)  # key=value, as on the command line
    parts: tuple[dict[str, str], ...] = ()  # each [[part]]'s own settings; () = one sweep

    def sweeps(self) -> list[dict[str, str]]:
        """The settings of each sweep the study runs: [settings] under each part's."""
        return [{**self.settings, **part} for part in self.parts] or [dict(self.settings)]

    @property
    def report_dir(self) -> str:
        return f"runs/study-{self.name}"


def names() -> list[str]:
    """The predefined studies shipped with the package."""
    return sorted(p.stem for p in STUDY_DIR.glob("*.toml"))


def load(ref: str) -> Study:
    """A predefined study by name (`demo`) or a study file by path (`my/study.toml`)."""
    is_path = ref.endswith(".toml") or "/" in ref or Path(ref).is_file()
    path = Path(ref).expanduser() if is_path else STUDY_DIR / f"{ref}.toml"
    if not path.is_file():
        if is_path:
            raise UsageError(f"study={ref}: no such file")
        raise UsageError(f"study={ref!r} is not a predefined study; choose from "
                         f"{', '.join(names())} or give the path of a .toml study file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"study={ref}: cannot read {path} ({e})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"study={ref}: {path} is not valid TOML ({e})") from None
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise UsageError(f"study={ref}: unknown entry {unknown[0]!r} in {path}; a study file has "
                         f"{' and '.join(TOP_LEVEL)} (key = value settings under [settings])")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"study={ref}: description in {path} must be a string")
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise UsageError(f"study={ref}: settings in {path} must be a table of key = value")
    where = f"study={ref}: {path}"
    parts = data.get("part", [])
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise UsageError(f"{where}: part must be [[part]] tables of key = value")
    return Study(path.stem, path, description, flatten(settings, where),
                 tuple(flatten(p, f"{where} [[part]] {i + 1}") for i, p in enumerate(parts)))


def flatten(table: dict, where: str, prefix: str = "") -> dict[str, str]:
    """{'model': 'gru,lstm', 'train': {'lr': 0.01}} -> {'model': 'gru,lstm', 'train.lr': '0.01'}."""
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, where, name + "."))
        elif isinstance(value, list):
            out[name] = ",".join(_text(name, v, where) for v in value)
        else:
            out[name] = _text(name, value, where)
    return out


def _text(key: str, value, where: str) -> str:
    """A TOML scalar as the command line would write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise UsageError(f"{where}: {key} = {value!r} is not a string, number or boolean")
