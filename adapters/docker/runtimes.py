"""The runtimes the local backend builds itself (no registry is needed): declared once, here.

``LOCAL_RUNTIMES`` feeds the control plane's catalog (``tp runtime ls``); ``RECIPES`` says how
``adapters.docker.images.build_runtime`` makes each image's root file system.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.catalog import RuntimeSpec

BUSYBOX = RuntimeSpec(
    name="busybox",
    image="localhost/tuneplane/runtime-busybox:1",
    python=None,
    process_model="single-process",
    description="BusyBox (Debian busybox-static): POSIX sh and the usual tools, no Python",
)
PYTHON = RuntimeSpec(
    name="python",
    image="localhost/tuneplane/runtime-python:3.11",
    python="3.11",
    process_model="single-process",
    description="Debian 12 minbase with python3-minimal (Python 3.11, `python` and `python3`)",
)

PYTHON_NUMPY = RuntimeSpec(
    name="python-numpy",
    image="localhost/tuneplane/runtime-python-numpy:3.11",
    python="3.11",
    process_model="single-process",
    description="Debian 12 minbase with Python 3.11 and NumPy (Debian's python3-numpy)",
    frameworks={"numpy": "1.24.2"},  # bookworm's python3-numpy 1:1.24.2-1+deb12u1
)

PYTHON_TORCH = RuntimeSpec(
    name="python-torch",
    image="localhost/tuneplane/runtime-python-torch:3.11",
    python="3.11",
    process_model="single-process",
    description="Debian 12 minbase with Python 3.11 and PyTorch 1.13 (Debian's python3-torch, CPU)",
    # bookworm's python3-torch 1.13.1+dfsg-4, as importlib.metadata reports it
    frameworks={"torch": "1.13.0a0+gitunknown", "numpy": "1.24.2"},
)

LOCAL_RUNTIMES: tuple[RuntimeSpec, ...] = (BUSYBOX, PYTHON, PYTHON_NUMPY, PYTHON_TORCH)


@dataclass(frozen=True, slots=True)
class Recipe:
    """How to make a runtime's root file system. Bump ``version`` when the recipe changes:
    it keys the rootfs cache and is recorded in the image's labels."""

    kind: str  # "busybox" | "debootstrap"
    version: str
    suite: str = ""
    include: tuple[str, ...] = ()


RECIPES: dict[str, Recipe] = {
    "busybox": Recipe(kind="busybox", version="1"),
    "python": Recipe(
        kind="debootstrap", version="1", suite="bookworm", include=("python3-minimal",)
    ),
    "python-numpy": Recipe(
        kind="debootstrap",
        version="1",
        suite="bookworm",
        include=("python3-minimal", "python3-numpy"),
    ),
    "python-torch": Recipe(
        kind="debootstrap",
        version="1",
        suite="bookworm",
        include=("python3-minimal", "python3-torch"),
    ),
}
