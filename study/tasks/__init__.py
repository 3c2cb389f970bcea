"""Task families: one file each, registered with `study.core.registry.register("task", ...)`."""
