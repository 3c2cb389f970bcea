"""Analyses: one file each, registered with `study.core.registry.register("analysis", ...)`."""
