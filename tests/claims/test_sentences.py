"""The verdict in plain words: a sentence per variable made from a planted verdict table names
each architecture under its strongest verdict, with the alignment, k and site that gave it,
and counts seeds where an architecture has several."""
import pandas as pd

from study.claims.aligned import COLUMNS
from study.claims.sentences import best_per_run, sentences


def _row(run, model, variable, alignment, verdict, iia, where, seed=0):
    row = {c: float("nan") for c in COLUMNS}
    row.update(run=run, model=model, seed=seed, variable=variable, alignment=alignment,
               verdict=verdict, iia=iia, where=where)
    return row


PLANTED = pd.DataFrame([
    _row("gru", "gru", "count", "oaf", "not aligned", 0.7, "k=4 state"),
    _row("gru", "gru", "count", "laf", "aligned", 0.99, "k=2 state"),
    _row("lstm", "lstm", "count", "laf", "aligned", 0.97, "k=2 cell"),
    _row("rope2", "rope2", "count", "oaf", "not aligned", 0.41, "k=16 resid[1]"),
    _row("rope2", "rope2", "count", "laf", "not aligned", 0.35, "k=2 resid[1]"),
    _row("gru", "gru", "up_down", "oaf", "partial", 0.8, "k=1 state"),
    _row("lstm", "lstm", "up_down", "oaf", "confounded with the answer", 0.95, "k=1 cell"),
    _row("rope2", "rope2", "up_down", "oaf", "did not learn", 0.2, "k=1 resid[1]"),
], columns=COLUMNS)


def test_one_sentence_per_variable_naming_each_architecture_by_its_strongest_verdict():
    said = sentences(PLANTED)
    assert len(said) == 2
    count, up_down = said
    assert count.startswith("count: gru and lstm hold it in a subspace")
    # the GRU is read at its aligned LAF, not its unaligned OAF; rope2 at its best alignment
    assert "gru: LAF, k = 2 at state, IIA 0.99" in count
    assert "lstm: LAF, k = 2 at cell, IIA 0.97" in count
    assert "rope2 does not (best: OAF, k = 16 at resid[1], IIA 0.41)" in count
    assert count.index("gru and lstm") < count.index("rope2")  # strongest verdict first
    assert "gru holds part of it" in up_down
    assert "the pairs cannot tell it from the answer for lstm" in up_down
    assert "rope2 did not learn the task" in up_down


def test_an_architecture_with_several_seeds_says_how_many_give_each_verdict():
    table = pd.DataFrame([
        _row("gru s0", "gru", "count", "laf", "aligned", 0.99, "k=2 state", seed=0),
        _row("gru s1", "gru", "count", "laf", "aligned", 0.95, "k=4 state", seed=1),
        _row("gru s2", "gru", "count", "laf", "not aligned", 0.5, "k=2 state", seed=2),
    ], columns=COLUMNS)
    (said,) = sentences(table)
    assert "gru (2 of 3 seeds) holds it in a subspace (LAF, k = 2 at state, IIA 0.99)" in said
    assert "gru (1 of 3 seeds) does not" in said


def test_the_best_row_per_run_and_variable_follows_the_verdict_then_the_iia():
    best = best_per_run(PLANTED)
    assert len(best) == 6
    pick = best[(best["run"] == "rope2") & (best["variable"] == "count")].iloc[0]
    assert pick["alignment"] == "oaf"  # both not aligned: the higher IIA
    assert sentences(PLANTED.iloc[0:0]) == []


def test_findings_say_each_architecture_with_its_interval_and_what_the_pairs_cannot_tell():
    """One finding per variable: each architecture under the verdict most of its seeds give,
    with the IIA interval over its seeds (over its pairs for one seed), where it is not held;
    a confounded variable is "not separable from" what the pairs confound it with; a table
    without the confound shares is marked under revision."""
    import pandas as pd

    from study.claims.sentences import UNDER_REVISION, findings
    rows = []
    for seed, verdict in enumerate(("aligned", "aligned", "partial")):
        rows.append(dict(run=f"gru s{seed}", model="gru", variable="count", alignment="oaf",
                         where="k=4 state", iia=0.95, iia_lo=0.93, iia_hi=0.97,
                         verdict=verdict, n_seeds=3, seeds_iia=0.94, seeds_lo=0.90,
                         seeds_hi=0.98, confound_input=0.1, confound_answer=0.2))
        rows.append(dict(run=f"rope2 s{seed}", model="rope2", variable="count",
                         alignment="oaf", where="k=16 resid[1]", iia=0.97, iia_lo=0.95,
                         iia_hi=0.99, verdict="confounded with the answer", n_seeds=3,
                         seeds_iia=0.97, seeds_lo=0.96, seeds_hi=0.98, confound_input=0.1,
                         confound_answer=0.99))
    said = findings(pd.DataFrame(rows))
    assert said == ["count (3 seeds each): held in a subspace by gru 0.94 [0.90, 0.98]; not "
                    "separable from the answer in rope2 0.97 [0.96, 0.98] at resid[1]."]
    old = pd.DataFrame(rows).drop(columns=["confound_input", "confound_answer"])
    assert findings(old)[0].endswith(f"({UNDER_REVISION}).")
