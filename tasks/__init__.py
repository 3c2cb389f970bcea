"""Task families: one file each, registered with `study.registry.register("task", ...)`."""
