"""Which distributions a GPU machine needs beyond what it has (deploy/gpu/wheels.sh).

Walks TunePlane's runtime dependencies (no extras) in THIS environment, stopping at what
``present.txt`` says the machine has (their own dependencies come with them), and prints
``NAME==VERSION`` (the versions installed here) one a line. ``--also NAME`` adds a present one
whose version there may be too old for us: check.sh installs its wheel only if the machine's
copy does not satisfy TunePlane's requirement.

    python deploy/gpu/needed.py [--present FILE] [--also NAME ...]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def _read_names(path: Path) -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {canonicalize_name(line) for line in lines if line}


def _requirements(name: str, extras: frozenset[str]) -> list[Requirement]:
    env = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64",
           "platform_python_implementation": "CPython", "implementation_name": "cpython",
           "os_name": "posix"}  # fmt: skip
    out = []
    for raw in md.distribution(name).requires or []:
        req = Requirement(raw)
        if req.marker is None or any(
            req.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras)
        ):
            out.append(req)
    return out


def _closure(names: set[str]) -> set[str]:
    """``names`` and what they depend on, as far as this environment knows them."""
    out: set[str] = set()
    stack = list(names)
    while stack:
        key = canonicalize_name(stack.pop())
        if key in out:
            continue
        out.add(key)
        # one not installed here (torch): present.txt lists what it brings
        with contextlib.suppress(md.PackageNotFoundError):
            stack += [r.name for r in _requirements(key, frozenset())]
    return out


def needed(present: set[str], also: set[str]) -> dict[str, str]:
    """``{name: version}`` of every distribution TunePlane needs that is not present."""
    present = _closure(present)
    seen: dict[str, frozenset[str]] = {}
    found: dict[str, str] = {}
    stack: list[tuple[str, frozenset[str]]] = [("tuneplane", frozenset())]
    while stack:
        name, extras = stack.pop()
        key = canonicalize_name(name)
        if key in seen and extras <= seen[key]:
            continue
        seen[key] = seen.get(key, frozenset()) | extras
        if key in also:
            found[key] = md.version(key)
        if key in present:
            continue  # its dependencies are there with it
        if key != "tuneplane":
            found[key] = md.version(key)
        stack += [(r.name, frozenset(r.extras)) for r in _requirements(key, extras)]
    return dict(sorted(found.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--present", type=Path, default=Path(__file__).with_name("present.txt"))
    parser.add_argument("--also", action="append", default=[])
    args = parser.parse_args()
    try:
        names = needed(_read_names(args.present), {canonicalize_name(a) for a in args.also})
    except md.PackageNotFoundError as exc:
        print(f"error: {exc} is not installed here (fix: source deploy/dev/setup.sh)",
              file=sys.stderr)  # fmt: skip
        return 2
    for name, version in names.items():
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
