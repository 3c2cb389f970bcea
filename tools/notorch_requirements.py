"""The package's dependencies, and theirs, that a GPU node's own Python and torch lack: every
distribution the installed `comparative-interp` needs (with its `test` extra), less torch and
what comes with it (triton, nvidia-*, and torch's own dependencies where nothing else of ours
needs them). One name a line, unpinned, so that `pip install --no-index --find-links DIR -r`
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
    while todo:
        name = todo.pop()
        if name in seen or skip.match(name):
            continue
        try:
            seen[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # a marker-less optional one not installed here
        todo += _requires(name)
    return seen


def main(argv: list[str]) -> int:
    pinned = "--pinned" in argv
    for name, version in sorted(closure(ROOT_DIST, EXTRAS).items()):
        print(f"{name}=={version}" if pinned else name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
