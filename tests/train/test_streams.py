"""Training batches of tasks that sample them on the fly: batch i is a pure function of
(seed, i), so generating blocks in several processes must give the batches one thread gives,
and those are the task's own `train_batch(i)`."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from study.core.labels import IGNORE
from study.train.streams import OnTheFlyStream, auto_workers
from tests.conftest import project_entries

CPU = torch.device("cpu")


def _sampling_tasks():
    out = []
    for entry in project_entries("task").values():
        task = entry.obj(entry.make_config("smoke"))
        if task.train_batch(0, 1) is not None:
            out.append(pytest.param(task, id=entry.name))
    return out


@pytest.mark.parametrize("task", _sampling_tasks())
def test_batches_are_the_same_whatever_the_number_of_generating_processes(task):
    batch, steps = 16, 150
    one = OnTheFlyStream(task, batch, steps, CPU, "answer", workers=0)
    two = OnTheFlyStream(task, batch, steps, CPU, "answer", workers=2)
    one.block = two.block = 40  # several blocks, and a last one cut short at `steps`
    try:
        assert two.workers == 2
        for i in (0, 1, 39, 40, 41, 99, 120, steps - 1):
            a, b = one.batch(i), two.batch(i)
            for x, y in zip(a, b):
                assert x.dtype == y.dtype and torch.equal(x, y)
            ex = task.train_batch(i, batch)
            width = ex.ids.shape[1]
            assert a[0].dtype == torch.int64
            assert np.array_equal(a[0][:, :width].numpy(), ex.ids)
            assert np.array_equal(a[1][:, :width].numpy(), np.where(ex.labels == IGNORE, IGNORE,
                                                                    ex.labels))
    finally:
        one.close()
        two.close()


def test_generating_processes_are_used_on_cuda_only_unless_asked_for():
    assert auto_workers(-1, CPU) == 0
    assert auto_workers(3, CPU) == 3
    assert 0 <= auto_workers(-1, torch.device("cuda")) <= 8
    assert auto_workers(0, torch.device("cuda")) == 0
