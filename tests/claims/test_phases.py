"""Phase detection on synthetic training curves whose plateaus and jumps are known."""
import numpy as np
import pytest

from study.claims.phases import detect

EVERY = 50  # steps between evaluations


def plateaus(levels, lengths, noise=0.01, seed=0):
    """steps, accuracy: consecutive plateaus at `levels` with `lengths` evaluations each."""
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.full(n, v) for v, n in zip(levels, lengths)])
    y = np.clip(y + rng.normal(0, noise, len(y)), 0, 1)
    return np.arange(len(y)) * EVERY, y


def starts(lengths):
    """Training step of the first evaluation of every plateau after the first."""
    return list(np.cumsum(lengths)[:-1] * EVERY)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binding_like_curve_has_three_plateaus_and_two_boundaries(seed):
    # Binding's published trajectory: ≈12 % (chance over the answer digits), ≈56 %, > 99.9 %.
    lengths = [40, 25, 35]
    steps, acc = plateaus([0.12, 0.56, 0.999], lengths, seed=seed)
    ph = detect(steps, acc)
    assert len(ph.boundaries) == 2
    for got, want in zip(ph.boundaries, starts(lengths)):
        assert abs(got - want) <= EVERY, (ph.boundaries, starts(lengths))
    assert ph.levels == pytest.approx([0.12, 0.56, 0.999], abs=0.02)


def test_single_jump_gives_one_boundary():
    lengths = [30, 30]
    steps, acc = plateaus([0.3, 0.95], lengths, noise=0.02)
    ph = detect(steps, acc)
    assert len(ph.boundaries) == 1
    assert abs(ph.boundaries[0] - starts(lengths)[0]) <= EVERY
    assert ph.levels == pytest.approx([0.3, 0.95], abs=0.02)


def test_falling_curve_boundary_is_where_it_drops():
    lengths = [20, 20]
    steps, acc = plateaus([0.9, 0.2], lengths)
    ph = detect(steps, acc)
    assert len(ph.boundaries) == 1
    assert abs(ph.boundaries[0] - starts(lengths)[0]) <= EVERY


@pytest.mark.parametrize("seed", range(5))
def test_flat_noisy_curve_has_no_boundary(seed):
    steps, acc = plateaus([0.5], [60], noise=0.03, seed=seed)
    ph = detect(steps, acc)
    assert ph.boundaries == ()
    assert len(ph.levels) == 1 and ph.levels[0] == pytest.approx(0.5, abs=0.02)


def test_unsorted_steps_give_the_same_phases_as_sorted_ones():
    lengths = [30, 20, 30]
    steps, acc = plateaus([0.12, 0.56, 0.999], lengths)
    perm = np.random.default_rng(7).permutation(len(steps))
    shuffled = detect(steps[perm], acc[perm])
    assert shuffled == detect(steps, acc)
    assert len(shuffled.boundaries) == 2
    for got, want in zip(shuffled.boundaries, starts(lengths)):
        assert abs(got - want) <= EVERY


def test_boundaries_are_reported_in_training_steps_not_indices():
    # Irregular evaluation steps (e.g. a resumed run): the boundary is a step that was evaluated.
    steps = np.array([0, 10, 20, 40, 80, 160, 320, 640, 1280, 2560])
    acc = np.array([0.1, 0.1, 0.11, 0.1, 0.1, 0.9, 0.91, 0.9, 0.9, 0.9])
    ph = detect(steps, acc)
    assert ph.boundaries == (160,)


def test_empty_and_tiny_inputs_do_not_fail():
    assert detect([], []).boundaries == ()
    assert detect([0], [0.5]).boundaries == ()
    assert detect([0, 1], [0.1, 0.9]).boundaries == (1,)


def test_learned_from_needs_the_accuracy_to_stay_above_the_bar():
    from study.claims.phases import learned_from
    steps = [0, 10, 20, 30, 40, 50]
    assert learned_from(steps, [0.1, 0.95, 0.3, 0.5, 0.92, 0.97], 0.9) == 40  # spike at 10
    assert learned_from(steps, [0.1, 0.2, 0.9, 0.95, 0.96, 0.99], 0.9) == 20  # the bar counts
    assert learned_from(steps, [0.1, 0.95, 0.96, 0.97, 0.98, 0.5], 0.9) is None  # fell back
    assert learned_from(steps[::-1], [0.97, 0.92, 0.5, 0.3, 0.95, 0.1], 0.9) == 40  # any order
    assert learned_from([], [], 0.9) is None


def test_a_curve_still_rising_at_the_end_shows_its_final_accuracy_beside_its_plateaus():
    """A slow climb to 1.0 after a flat start: the last plateau is the climb's mean, well
    below where training ended; the phase row says both."""
    from types import SimpleNamespace

    import pandas as pd

    from study.claims.curves import accuracy_curves
    from study.reports.sections.trajectory import phase_rows
    acc = np.concatenate([np.full(30, 0.014), np.linspace(0.05, 1.0, 30)])
    metrics = pd.DataFrame({"step": np.arange(60) * EVERY, "split": "val", "stratum": "all",
                            "metric": "accuracy", "value": acc})
    run = SimpleNamespace(label="rope2 s0", metrics=metrics)
    row = phase_rows(run, accuracy_curves(run))
    last = float(row["plateaus (mean level)"].split(" → ")[-1])
    assert last < 0.9
    assert row["final accuracy"] == "1.000"
