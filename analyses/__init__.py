"""Analyses: one file each, registered with `study.registry.register("analysis", ...)`."""
