"""`python -m study doctor` on this machine: versions, the driver (or its absence), whether bf16
autocast, torch.compile and fused AdamW work here, the settings a run would use, what
`jobs=auto` starts, and a tokens/s probe of the training engine."""
from __future__ import annotations

import re

import torch

from study.cli import main


def test_doctor_reports_this_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    code = main(["doctor", "seconds=1", "task=counting", "model=gru", "scale=smoke"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(rf"^torch +{re.escape(torch.__version__)} \(", out, re.M)
    for label in ("python", "NVIDIA driver", "bf16 autocast", "torch.compile", "fused AdamW",
                  "run settings", "sweep jobs=auto", "probe"):
        assert re.search(rf"^{re.escape(label)} ", out, re.M), label
    assert re.search(r"^torch.compile +yes: ", out, re.M) and re.search(r"^fused AdamW +yes: ", out, re.M)
    if not torch.cuda.is_available():
        assert re.search(r"^run settings +device cpu, fp32, compile off, CUDA graphs off, fused AdamW off", out, re.M)
    probe = re.search(r"(\d+) steps in ([\d.]+) s, [\d.]+ steps/s, ([\d,]+) tokens/s", out)
    assert probe and int(probe.group(1)) > 0 and int(probe.group(3).replace(",", "")) > 0
    assert out.strip().endswith("doctor: everything a run needs works")


def test_doctor_refuses_unknown_settings(capsys):
    assert main(["doctor", "batch=3"]) == 2
    assert "unknown key 'batch' for doctor" in capsys.readouterr().err
