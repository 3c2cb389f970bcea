"""`python -m study results SWEEP [out=DIR]`: a finished sweep's result folder (its tables and
manifest, `study/sweep/result_tables.py`), by default `results/<study>-<date>/`."""
from __future__ import annotations

from pathlib import Path

from study.core.errors import UsageError
from study.sweep.plan import find_sweep
from study.sweep.result_tables import default_out, write_results


def cmd_results(args):
    where = [a for a in args if "=" not in a or a.startswith("study=")]
    options = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("study="))
    out = options.pop("out", None)
    if options or len(where) != 1:
        raise UsageError("usage: results SWEEP_DIR|STUDY [out=DIR] (a finished sweep's folder, "
                         "or its study's name or file)")
    record, _ = find_sweep([where[0].removeprefix("study=")])
    out_dir = Path(out) if out else default_out(record.get("name") or "sweep")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"out={out_dir} is a file, not a folder; choose another out=")
    print(write_results(record, out_dir))
    return 0
