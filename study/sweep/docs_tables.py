"""The docs' result tables, made from the committed result folders:
`python -m study results-docs [check=true]`.

In a Markdown page under docs/, a table between the markers

    <!-- results:FOLDER/TABLE [columns=A,B,...] [where=COLUMN:VALUE[,VALUE...]] [digits=N] -->
    ...
    <!-- /results -->

is rewritten from `results/FOLDER/TABLE.csv` (`study/sweep/result_tables.py`): the columns asked (all
but `time_limited` by default), the rows whose COLUMN is one of the VALUEs (`where` may be
given more than once), numbers to N decimals (3 by default). A line under the table names the
file and the command and commit that made it. A run that the time guard stopped is marked
"(time guard)" wherever it is named: it is no study result. `check=true` rewrites nothing and
fails (exit 1) naming each page whose tables differ from what the data gives, which the
default tests run, so that a number edited by hand, or data changed without its docs, fails.
`FOLDER/findings` is not a table but the folder's findings in a line per variable
(`study.claims.sentences.findings` of its verdict table: each architecture's verdict with its
IIA and interval), each linked to the folder: the README's "What it found" box is made so.
A marker that is misspelt or unpaired is an error (one line naming the page and line), with
or without check=true.
"""
from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

from study.core.errors import UsageError
from study.sweep.result_tables import RESULTS_ROOT, read_manifest, read_table

DOCS = RESULTS_ROOT.parent / "docs"
BLOCK = re.compile(r"(<!-- results:(?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- /results -->)",
                   re.DOTALL)
GUARDED = " (time guard)"


def _cell(v, digits: int) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1000:
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|")


def parse_spec(spec: str) -> tuple[str, str, dict]:
    """(folder, table, options) of a marker's text."""
    words = shlex.split(spec)
    if not words or "/" not in words[0]:
        raise UsageError(f"results marker {spec!r}: give FOLDER/TABLE first")
    folder, _, table = words[0].rpartition("/")
    options: dict = {"columns": None, "where": [], "digits": 3}
    for w in words[1:]:
        key, sep, value = w.partition("=")
        if key == "columns" and sep:
            options["columns"] = value.split(",")
        elif key == "where" and sep and ":" in value:
            col, _, values = value.partition(":")
            options["where"].append((col, values.split(",")))
        elif key == "digits" and sep and value.isdigit():
            options["digits"] = int(value)
        else:
            raise UsageError(f"results marker {spec!r}: {w!r} is not columns=A,B, "
                             f"where=COLUMN:VALUE or digits=N")
    return folder, table, options


def render_findings(folder: str, opt: dict, root: Path, page: Path | None) -> str:
    """A folder's findings as Markdown bullets, each linking to the folder (relative to
    `page`)."""
    import os

    from study.claims.sentences import findings
    df = read_table(root / folder, "verdicts")
    for col, values in opt["where"]:
        if col not in df.columns:
            raise UsageError(f"results marker {folder}/findings: no column {col!r} in verdicts")
        df = df[df[col].astype(str).isin(values)]
    study = read_manifest(root / folder).get("study") or folder
    link = Path(os.path.relpath(root / folder, page.parent if page else DOCS)).as_posix() + "/"
    return "".join(f"- **{study}**: {line} [results/{folder}]({link})\n"
                   for line in findings(df))


def render(spec: str, root: Path = RESULTS_ROOT, page: Path | None = None) -> str:
    """The Markdown a marker's block holds: the table and the line naming its source (for
    `FOLDER/findings`, the folder's findings, `render_findings`)."""
    folder, table, opt = parse_spec(spec)
    if table == "findings":
        return render_findings(folder, opt, root, page)
    df = read_table(root / folder, table)
    manifest = read_manifest(root / folder)
    for col, values in opt["where"]:
        if col not in df.columns:
            raise UsageError(f"results marker {spec!r}: no column {col!r} in {table}")
        df = df[df[col].astype(str).isin(values)]
    guarded = df["time_limited"].astype(bool) if "time_limited" in df.columns else None
    columns = opt["columns"] or [c for c in df.columns if c != "time_limited"]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UsageError(f"results marker {spec!r}: no column {missing[0]!r} in {table}; it has "
                         f"{', '.join(df.columns)}")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for i, (_, row) in enumerate(df.iterrows()):
        cells = [_cell(row[c].item() if hasattr(row[c], "item") else row[c], opt["digits"])
                 for c in columns]
        if guarded is not None and bool(guarded.iloc[i]):
            cells = [c + GUARDED if col in ("run", "other_run") else c
                     for c, col in zip(cells, columns)]
        lines.append("| " + " | ".join(cells) + " |")
    commit = manifest.get("commit")  # the runs' commits, one or a list (runs started later)
    commits = [commit] if isinstance(commit, str) else [c for c in commit or [] if c]
    made_at = (f"commit {commits[0][:10]}" if len(commits) == 1 else
               f"commits {', '.join(c[:10] for c in commits)}" if commits else "an unrecorded commit")
    lines += ["", f"*From `results/{folder}/{table}.csv`: `{manifest.get('command')}` at "
                  f"{made_at}.*"]
    return "\n".join(lines) + "\n"


# anything that looks like a results marker, spelt right or not (`<!--result:`, `<!-- /Results-->`)
LOOSE = re.compile(r"<!--\s*/?\s*results?\b", re.IGNORECASE)
OPEN = re.compile(r"<!-- results:[^>]*? -->")
CLOSE = "<!-- /results -->"


def check_markers(text: str, where: str = "the page") -> None:
    """Every results marker of `text` (a line that starts with one) spelt as the module says
    and paired, an opening one followed by its closing one before the next block opens;
    else a one-line UsageError naming the line (a deleted closing marker would join two
    blocks, a misspelt opening one would leave a table unchecked)."""
    opened = None
    for n, line in enumerate(text.splitlines(), 1):
        rest = line.strip()
        if LOOSE.match(rest):  # a marker opens its line (one quoted in prose is text)
            if OPEN.fullmatch(rest):
                if opened is not None:
                    raise UsageError(f"{where}:{opened}: a results block has no closing "
                                     f"{CLOSE} before the next one opens (line {n})")
                opened = n
            elif rest == CLOSE:
                if opened is None:
                    raise UsageError(f"{where}:{n}: {CLOSE} closes no results block")
                opened = None
            else:
                raise UsageError(f"{where}:{n}: a misspelt results marker "
                                 f"({rest[:40]!r}); write <!-- results:FOLDER/TABLE ... --> "
                                 f"and {CLOSE}")
    if opened is not None:
        raise UsageError(f"{where}:{opened}: a results block has no closing {CLOSE}")


def rewrite(text: str, root: Path = RESULTS_ROOT, where: str = "the page") -> str:
    """`text` with every results block made again from the data (its markers checked
    first, `check_markers`); `where`, the page's path, makes the findings' links relative
    to it."""
    check_markers(text, where)
    page = Path(where) if where != "the page" else None
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("spec"), root, page) + m.group(4),
                     text)



def pages(docs: Path | None = None) -> list[Path]:
    """The Markdown pages under `docs` (docs/ by default), and the README beside it, that
    hold a results block."""
    docs = docs or DOCS
    found = list(docs.rglob("*.md")) + [p for p in (docs.parent / "README.md",) if p.is_file()]
    return sorted(p for p in found if LOOSE.search(p.read_text()))


def cmd_results_docs(args):
    options = dict(a.split("=", 1) for a in args if "=" in a)
    if len(options) != len(args) or set(options) - {"check"}:
        raise UsageError("usage: results-docs [check=true]")
    from study.core.coerce import coerce
    check = coerce("check", options.get("check", "false"), bool)
    stale = []
    for page in pages():
        text = page.read_text()
        new = rewrite(text, where=str(page))
        if new != text:
            stale.append(page)
            if not check:
                from study.core.rundir import atomic_write_bytes
                atomic_write_bytes(page, new.encode())
    for page in stale:
        print(f"{'differs from its data' if check else 'rewrote'}: {page}")
    if check and stale:
        print("run `python -m study results-docs` to make the tables from the data again")
        return 1
    return 0
