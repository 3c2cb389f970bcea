"""One run: its resolved settings (`config`), the checks before it starts (`preflight`,
`estimate`, `flops`), the pieces it is built from (`build`), its status on disk (`runstate`),
the run handle that reopens it (`handle`, `runs`, `intervene`: `study.open_run`), and the work
done on it (`runner` trains, `analyze` analyses, `compare` compares runs)."""
