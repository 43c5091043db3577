"""Which of the carried wheels this machine needs (deploy/gpu/check.sh): TunePlane's own, every
wheel whose distribution is not installed here, and those installed at a version TunePlane's
own wheel does not accept (protobuf on a machine with an older one). Standard library only (it
runs before anything is installed); prints the wheels' paths, one a line.

    python3 deploy/gpu/select_wheels.py DIR
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import zipfile
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(wheel: Path) -> dict[str, str]:
    """``{name: specifier}`` of TunePlane's own runtime requirements (no extras)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            req = line.split(":", 1)[1].split(";")[0].strip()
            m = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*\(?([^)]*)\)?", req)
            if m:
                out[canonical(m.group(1))] = m.group(3).strip()
    return out


def accepts(specifier: str, version: str) -> bool:
    """Whether ``version`` meets ``specifier``; True when it cannot be told (no packaging)."""
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:
        return True
    return SpecifierSet(specifier).contains(version, prereleases=True)


def main() -> int:
    folder = Path(sys.argv[1])
    wheels = sorted(folder.glob("*.whl"))
    own = [w for w in wheels if w.name.startswith("tuneplane-")]
    if not own:
        print(f"error: no tuneplane-*.whl in {folder} (fix: bash deploy/gpu/wheels.sh)",
              file=sys.stderr)  # fmt: skip
        return 2
    wanted = requirements(own[0])
    print(own[0])  # always: the TunePlane this run proves, whatever else is installed
    for wheel in wheels:
        name = canonical(wheel.name.split("-")[0])
        if wheel == own[0]:
            continue
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            print(wheel)
            continue
        if name in wanted and not accepts(wanted[name], have):
            print(f"{name} {have} is here, TunePlane needs {wanted[name]}: its wheel is used",
                  file=sys.stderr)  # fmt: skip
            print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
