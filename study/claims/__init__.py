"""The claims: what a set of finished runs says, as tables made from their tables.

Torch-free, between the analyses (which write each run's tables) and the reports and the
result folders (which only draw or write what is made here):

- `runs`: a run directory as tables (`RunTables`, `load_run`, `load_runs`);
- `learnt`: whether a run learnt its task (`LEARNED_ACC`);
- `curves`, `phases`: accuracy trajectories and their plateaus;
- `cross`: the cross-run comparison tables over a set of runs and the matched-k rule;
- `intervals`: intervals over runs (the run-resampling bootstrap);
- `rules`: every verdict rule (a run's alignment; a pair of architectures' sharing);
- `aligned`, `shared`, `gaps`, `results`: the verdict, sharing, alignment-gap and result tables;
- `sentences`: the verdict in plain words, a sentence per causal variable.
"""
