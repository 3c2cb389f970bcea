"""The run's metrics table, `metrics.parquet`: one row per (step, split, stratum, metric),
rewritten whole before every checkpoint so that it never runs behind the training state."""
from __future__ import annotations

import io

import pandas as pd

from study.core.rundir import RunDir, atomic_write_bytes
from study.train import checkpoint as ckpt

METRIC_COLUMNS = ("step", "split", "stratum", "metric", "value")


def metrics_frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    return df.astype({"step": "int64", "split": str, "stratum": str, "metric": str, "value": "float64"})


def write_metrics(run: RunDir, rows: list[tuple]) -> None:
    buf = io.BytesIO()
    metrics_frame(rows).to_parquet(buf, index=False)
    atomic_write_bytes(run.metrics_path, buf.getvalue())


def read_metrics(run: RunDir, up_to: int) -> list[tuple]:
    """The rows of steps up to `up_to`: the table may run ahead of the state a run resumes
    from, and a resumed run writes those rows again."""
    try:
        df = pd.read_parquet(run.metrics_path)
        if tuple(df.columns) != METRIC_COLUMNS:
            raise ValueError(f"columns {list(df.columns)}")
    except Exception as e:
        raise ckpt.CheckpointError(f"cannot resume: {run.metrics_path} is unreadable ({e}); "
                                   f"re-run with force") from None
    df = df[df["step"] <= up_to]
    return [(int(s), sp, st, m, float(v)) for s, sp, st, m, v in df.itertuples(index=False, name=None)]
