"""Checks of a machine and of speed: `doctor`, `gpu-check` (`gpu_check*`) and `bench`
(`bench*`). Above `study.run` and `study.sweep`; nothing imports them but the command line."""
