"""`readout=`: the logits of chosen positions only, equal to the full output's at those positions."""
import pytest
import torch

from tests.conftest import frozen_smoke_model, project_entries


@pytest.mark.parametrize("name", list(project_entries("model")))
def test_readout_equals_full_logits_at_the_chosen_positions(name):
    task, model, _ = frozen_smoke_model("counting", name)
    ids = torch.as_tensor(task.split("test").ids[:6]).long()  # (6, seq_len)
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(ids.shape, generator=g) < 0.3  # (6, seq_len) bool
    full = model(ids)  # (6, seq_len, vocab)
    part = model(ids, readout=mask)  # (n_true, vocab)
    assert part.shape == (int(mask.sum()), full.shape[-1])
    torch.testing.assert_close(part, full[mask], rtol=1e-5, atol=1e-5)
