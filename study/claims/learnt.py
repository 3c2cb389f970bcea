"""The "learnt" rule: whether a run learnt its task, and so has a task variable to judge or
to compare [ours].

A network that does not do the task can still score where the readout reads the answer, so
a run below `LEARNED_ACC` test accuracy gets no alignment verdict and is left out of every
cross-architecture mean. One home for the threshold: the verdicts, the sharing tables, the
reports and the `run` command's closing line all read it here.
"""
from __future__ import annotations

LEARNED_ACC = 0.9  # test accuracy below which a run has not learnt its task [ours]
NOT_LEARNT_NOTE = (f" Runs marked \"not learnt\" stay below {LEARNED_ACC:.0%} test accuracy: "
                   "they have no task variable to compare, so their rows and columns say "
                   "nothing about how architectures carry it.")


def accuracy_on_test(run) -> float:
    """The run's test accuracy (`summary.json`); NaN where not recorded."""
    acc = run.summary.get("test_accuracy")
    return float(acc) if isinstance(acc, (int, float)) else float("nan")


def learnt(run) -> bool:
    """The run reached `LEARNED_ACC` (or recorded no test accuracy)."""
    return not accuracy_on_test(run) < LEARNED_ACC


def any_not_learnt(runs) -> bool:
    return not all(learnt(r) for r in runs)


def display_label(run) -> str:
    """The run's label, marked when its test accuracy is below `LEARNED_ACC`."""
    if not learnt(run):
        return f"{run.label} (not learnt, acc {accuracy_on_test(run):.2f})"
    return run.label


def learnt_pairs(df):
    """The rows of a cross-run table (`run`, `other_run`) of two different runs that both
    learnt the task (`run_learnt`, `other_run_learnt`; every run where those columns are
    absent) [ours: a network without the variable says nothing about how another
    architecture carries it]."""
    keep = df["run"] != df["other_run"]
    for c in ("run_learnt", "other_run_learnt"):
        if c in df:
            keep &= df[c].fillna(True).astype(bool)
    return df[keep]
