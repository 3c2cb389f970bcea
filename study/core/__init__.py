"""The kernel every other package imports: registries, errors, value coercion, declared
settings (`settings`: the key=value grammar, one resolution of every group's config, JSON
back to configs), the run directory and its atomic writes. It imports nothing from study.tasks,
study.models, study.analyses, study.reports or the rest of `study`."""
