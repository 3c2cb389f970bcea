"""A table as GitHub Markdown: what the reports and the benchmarks print."""
from __future__ import annotations


def markdown_table(df) -> str:
    """A pandas DataFrame as a GitHub Markdown table (floats to 4 significant digits)."""
    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
