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
