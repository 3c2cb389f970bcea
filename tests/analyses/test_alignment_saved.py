"""Every registered alignment kind, saved as the das analysis saves it
(`alignments.safetensors`: `saved_tensors()` under its file key) and rebuilt by
`load_alignment`, is the same alignment: the same class, k and maps, and the same
interchange on every row and on a row selection, cached or not."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from study.analyses.das.alignment import cached_maps, load_alignment, make_alignment
from study.analyses.das.alignments import names
from study.core.alignments import file_key

D, K = 7, 3


def _trained_like(name: str, form: str):
    """A fresh alignment of kind `name`, moved off its initial draw as training moves it:
    every parameter perturbed, the standardisation fitted."""
    inst = make_alignment(name, D, K, seed=5, laf_form=form)
    g = torch.Generator().manual_seed(1)
    inst.fit_standardisation(torch.randn(64, D, generator=g) * 2 + 1)
    with torch.no_grad():
        for p in inst.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return inst


@pytest.mark.parametrize("form", ["sd", "rotated"])
@pytest.mark.parametrize("name", names())
def test_a_saved_alignment_reloads_as_the_same_intervention(tmp_path, name, form):
    inst = _trained_like(name, form)
    key = file_key(name, "up_down:count", "state@pair", K)
    save_file({key + s: t for s, t in inst.saved_tensors().items()}
              | {file_key(name, "up_down:count", "state@pair", 10 * K) + "/k": torch.tensor(1)},
              str(tmp_path / "alignments.safetensors"))
    back = load_alignment(tmp_path / "alignments.safetensors", key)
    assert type(back) is type(inst) and back.k == inst.k == K
    for a, b in zip(inst.common_maps(), back.common_maps()):
        torch.testing.assert_close(a, b)
    g = torch.Generator().manual_seed(2)
    base, source = torch.randn(10, D, generator=g), torch.randn(10, D, generator=g)
    rows = torch.rand(10, generator=g) > 0.5  # (batch,) a row selection, as at the state
    with torch.no_grad():
        for sel in (None, rows):
            want = inst(base, source, sel)
            torch.testing.assert_close(back(base, source, sel), want)
            with cached_maps(back):
                torch.testing.assert_close(back(base, source, sel), want)
    # the interchange is not the identity: the test can tell a wrong rebuild
    assert not torch.allclose(want[rows], base[rows])
