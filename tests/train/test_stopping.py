"""Training stops on the validation split only: a run is never selected on the split it is
then judged on."""
from study.train.evaluate import reached


def test_the_target_is_read_on_val_and_the_test_split_never_stops_training():
    assert reached({"val": 0.99, "test": 0.5, "heldout": 0.1}, 0.98)
    assert not reached({"val": 0.97, "test": 1.0}, 0.98)


def test_without_val_the_other_splits_but_test_and_generalisation_sets_gate():
    assert reached({"train_eval": 0.99, "test": 0.2, "gen_hops": 0.1}, 0.98)
    assert not reached({"test": 1.0, "heldout": 1.0}, 0.98)  # nothing to gate on: never
    assert not reached({"val": 1.0}, None)
