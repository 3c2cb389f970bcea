"""The package's dependencies, and theirs, that a GPU node's own Python and torch may lack:
every distribution the installed `comparative-interp` needs (with its `test` extra), torch's
own pure-Python dependencies included (setuptools, sympy, ...: a venv made with
--system-site-packages may lack some), less torch's compiled stack (torch, triton, nvidia-*),
which the node provides. One name a line, unpinned, so that `pip install --no-index --find-links DIR -r`
keeps what the node already has and installs only what is missing, from the wheels.

    python tools/notorch_requirements.py [--pinned]    # run in the venv of `make setup`

`--pinned` writes name==version, for `pip wheel` to collect exactly the versions tested here
(`make wheelhouse-notorch`).
"""
from __future__ import annotations

import re
import sys
from importlib import metadata

ROOT_DIST, EXTRAS = "comparative-interp", ("test",)
TORCH_STACK = re.compile(r"^(torch|triton|nvidia-.*|pytorch-triton.*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requires(dist: str, extras=()) -> list[str]:
    """Names `dist` requires for this Python (with `extras`)."""
    out = []
    for req in metadata.requires(dist) or []:
        name, _, marker = req.partition(";")
        env_ok = True
        if marker.strip():
            from packaging.markers import Marker
            m = Marker(marker)
            env_ok = any(m.evaluate({"extra": e}) for e in ("", *extras))
        if env_ok:
            out.append(_norm(re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0]))
    return out


def closure(root: str, extras=(), skip=TORCH_STACK) -> dict[str, str]:
    """{name: installed version} of what `root` needs, transitively, `skip` and what only
    they need left out."""
    seen: dict[str, str] = {}
    todo = _requires(root, extras)
    walked: set[str] = set()
    while todo:
        name = todo.pop()
        if name in walked:
            continue
        walked.add(name)
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # a marker-less optional one not installed here
        if not skip.match(name):
            seen[name] = version
        if name == "torch" or not skip.match(name):  # torch's own dependencies count
            todo += _requires(name)
    return seen


def main(argv: list[str]) -> int:
    pinned = "--pinned" in argv
    for name, version in sorted(closure(ROOT_DIST, EXTRAS).items()):
        print(f"{name}=={version}" if pinned else name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
