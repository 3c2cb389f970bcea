"""`pip install .` puts one top-level package, `study`, into site-packages: it works beside
other projects' packages named `tasks`, `models`, `analyses` or `reports`, and the installed
copy carries everything `study list` and the default study need (subpackages and data)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_installed_package_works_beside_packages_named_like_its_subpackages(tmp_path):
    source = tmp_path / "source"  # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(ROOT / "study", source / "study",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    tops = sorted(p.name for p in target.iterdir()
                  if p.is_dir() and not p.name.endswith((".dist-info", ".egg-info")))
    assert tops == ["bin", "study"] or tops == ["study"], tops
    others = tmp_path / "others"
    for name in ("tasks", "models", "analyses", "reports"):
        (others / name).mkdir(parents=True)
        (others / name / "__init__.py").write_text(f"WHO = 'another project: {name}'\n")
    code = (
        "import tasks, models, analyses, reports, study\n"
        "assert models.WHO == 'another project: models' and tasks.WHO == 'another project: tasks'\n"
        f"assert study.__file__.startswith({str(target)!r}), study.__file__\n"
        "from study.core import registry\n"
        "from study.sweep import studies\n"
        "print(sorted(registry.builtin('task')), sorted(registry.builtin('model')),"
        " 'demo' in studies.names())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(others)])}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("] ")[-1].strip() == "True", out.stdout
    assert "'binding'" in out.stdout and "'gpt12'" in out.stdout and "'gru'" in out.stdout
