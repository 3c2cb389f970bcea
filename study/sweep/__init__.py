"""Many runs: the `sweep` command (`command`), its plan and options, the study files
(`studies`, `studies/*.toml`), the local and SLURM launchers, the runs' table (`show`), the
`status` command and the comparison and report at the end (`finish`). Above `study.run`."""
