"""The kernel every other package imports: registries, errors, value coercion, the run
directory and its atomic writes. It imports nothing from tasks/, models/, analyses/,
reports/ or the rest of `study`."""
