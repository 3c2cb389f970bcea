"""Building a report: runs grouped by task, every registered section applied to each group."""
from __future__ import annotations

from dataclasses import dataclass, field

from study.reports.figure import Figure, Section, slug
from study.claims.runs import RunTables
from study.reports.sections import sections


@dataclass
class TaskReport:
    task: str
    runs: list[RunTables]
    sections: list[Section] = field(default_factory=list)


@dataclass
class Report:
    runs: list[RunTables]
    tasks: list[TaskReport]

    @property
    def figures(self) -> list[Figure]:
        return [f for t in self.tasks for s in t.sections for f in s.figures]

    @property
    def n_charts(self) -> int:
        return sum(f.chart is not None for f in self.figures)

    @property
    def title(self) -> str:
        if len(self.runs) == 1:
            r = self.runs[0]
            return f"{r.task} × {r.model} (seed {r.seed}, scale {r.scale})"
        tasks = ", ".join(t.task for t in self.tasks)
        models = ", ".join(dict.fromkeys(r.model for r in self.runs))
        return f"{tasks}: {models} ({len(self.runs)} runs)"


def build_report(runs: list[RunTables]) -> Report:
    """Apply every section to the runs of each task (in the order the runs were given)."""
    groups: dict[str, list[RunTables]] = {}
    for r in runs:
        groups.setdefault(r.task, []).append(r)
    entries = sections()
    tasks = []
    for task, group in groups.items():
        tr = TaskReport(task, group)
        for entry in entries:
            figs = entry.build(group)
            for f in figs:  # keys unique across the whole report (links follow them)
                f.key = slug(task, f.key)
                f.links = tuple((text, slug(task, key)) for text, key in f.links)
            if figs:
                tr.sections.append(Section(entry.title, figs))
        tasks.append(tr)
    return Report(runs, tasks)
