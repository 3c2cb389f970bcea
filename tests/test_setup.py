"""Installs on clusters: `make wheelhouse` collects every wheel set-up needs, and
`make setup WHEELHOUSE=DIR` installs from it with no network at all (a compute node): pip runs
with `--no-index`, no configuration, and every proxy pointing nowhere."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request

import pytest

from tests.test_docs import ROOT, _repo_files

NOWHERE = "http://127.0.0.1:9"


@pytest.mark.slow  # downloads a few hundred MB, then installs torch and the package: minutes
def test_a_wheelhouse_installs_with_no_network(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20)
    except OSError as e:
        pytest.skip(f"PyPI is not reachable to build the wheelhouse: {e}")
    src = tmp_path / "src"  # a copy: the editable install writes beside the sources
    for path in _repo_files():
        dest = src / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    env = {**os.environ, "PIP_CACHE_DIR": str(tmp_path / "pip-cache")}
    t0 = time.perf_counter()
    built = subprocess.run(["make", "wheelhouse", f"VENV={tmp_path / 'build'}",
                            f"WHEELHOUSE_OUT={tmp_path / 'wh'}"], cwd=src, env=env,
                           capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    collected = time.perf_counter() - t0
    offline = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    offline.update(PIP_CONFIG_FILE=os.devnull, http_proxy=NOWHERE, https_proxy=NOWHERE,
                   HTTP_PROXY=NOWHERE, HTTPS_PROXY=NOWHERE, PIP_CACHE_DIR=str(tmp_path / "no-cache"))
    t0 = time.perf_counter()
    setup = subprocess.run(["make", "setup", f"WHEELHOUSE={tmp_path / 'wh'}",
                            f"VENV={tmp_path / 'venv'}"], cwd=src, env=offline,
                           capture_output=True, text=True, timeout=3600)
    installed = time.perf_counter() - t0
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    assert "--no-index --find-links" in setup.stdout
    listed = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-m", "study", "list"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0 and "binding" in listed.stdout, listed.stderr[-2000:]
    print(f"wheelhouse collected in {collected:.0f} s; installed with no network in {installed:.0f} s")
