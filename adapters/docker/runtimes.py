"""The runtimes the local backend builds itself (no registry is needed): declared once, here.

``LOCAL_RUNTIMES`` feeds the control plane's catalog (``tp runtime ls``); ``RECIPES`` says how
``adapters.docker.images.build_runtime`` makes each image's root file system.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.docker.pip_layer import lock_path, read_lock
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
    description="Debian 12 minbase with python3 (Python 3.11 and its whole standard library,"
    " `python` and `python3`)",
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

# TRL's stack on the CPU build of PyTorch from PyPI; the versions are the lock file's
# (adapters/docker/locks/pytorch-trl.txt), so what the contract declares is what is installed.
# The contract's ``packages`` is the whole lock: Debian's python3 itself brings no distribution
# importlib.metadata sees, so the lock is everything the image holds, and the runner refuses
# an image that holds anything else (docs/runtimes.md, "Contents drift").
TRL_PINS = ("torch==2.13.0", "trl==1.16.0", "transformers==5.10.4", "peft==0.21.2",
            "accelerate==1.16.0", "datasets==5.2.0", "tensorboard==2.21.0")  # fmt: skip
TRL_FRAMEWORKS = ("torch", "trl", "transformers", "peft", "accelerate", "datasets")


def _locked(runtime: str, names: tuple[str, ...]) -> dict[str, str]:
    versions = read_lock(lock_path(runtime))
    return {name: versions[name] for name in names}


PYTORCH_TRL = RuntimeSpec(
    name="pytorch-trl",
    image="localhost/tuneplane/runtime-pytorch-trl:1",
    python="3.11",
    process_model="torch-process-group",
    description="Debian 12 with Python 3.11, PyTorch (CPU), transformers, TRL, PEFT, accelerate"
    " and datasets from PyPI, at the versions of its lock file",
    frameworks=_locked("pytorch-trl", TRL_FRAMEWORKS),
    packages=read_lock(lock_path("pytorch-trl")),
)

# verl's stack on the same CPU PyTorch and transformers as pytorch-trl (verl 0.9.1 allows
# transformers >=5.5.3,<5.11), with the Ray verl asks for (ray[default]: its dashboard and
# agent, which `ray start` runs). verl[verl-core], not bare verl: verl.trainer.main_ppo imports
# transfer_queue (TransferQueue) and cachetools, which only that extra brings. No rollout engine
# (vLLM, SGLang): their wheels are CUDA builds on another torch (docs/recipes.md).
VERL_PINS = ("torch==2.13.0", "verl[verl-core]==0.9.1", "ray[default]==2.60.0",
             "transformers==5.10.4", "peft==0.21.2", "accelerate==1.16.0", "datasets==5.2.0",
             "tensorboard==2.21.0")  # fmt: skip
VERL_FRAMEWORKS = ("verl", "ray", "torch", "transformers", "peft", "accelerate", "datasets")

VERL = RuntimeSpec(
    name="verl",
    image="localhost/tuneplane/runtime-verl:1",
    python="3.11",
    process_model="ray",
    description="Debian 12 with Python 3.11, verl, Ray, PyTorch (CPU), transformers, PEFT,"
    " accelerate and datasets from PyPI, at the versions of its lock file; no rollout engine",
    frameworks=_locked("verl", VERL_FRAMEWORKS),
    packages=read_lock(lock_path("verl")),
)

LOCAL_RUNTIMES: tuple[RuntimeSpec, ...] = (
    BUSYBOX, PYTHON, PYTHON_NUMPY, PYTHON_TORCH, PYTORCH_TRL, VERL
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Recipe:
    """How to make a runtime's root file system. Bump ``version`` when the recipe changes:
    it keys the rootfs cache and is recorded in the image's labels."""

    kind: str  # "busybox" | "debootstrap"
    version: str
    suite: str = ""
    include: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()  # top-level pins of a Python layer, locked in locks/<name>.txt


RECIPES: dict[str, Recipe] = {
    "busybox": Recipe(kind="busybox", version="1"),
    # python3, not python3-minimal: the minimal package lacks most of the standard library
    # (json, importlib.metadata, sqlite3, ...), so `report.log` failed there with "No module
    # named 'json'"; version 2 is that change (an image of version 1 is rebuilt)
    "python": Recipe(kind="debootstrap", version="2", suite="bookworm", include=("python3",)),
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
    "pytorch-trl": Recipe(
        kind="debootstrap",
        version="2",  # 2: the pip layer byte-compiled (pip_layer.compile_layer)
        suite="bookworm",
        include=("python3",),  # the whole standard library (importlib.metadata, sqlite3, …)
        pip=TRL_PINS,
    ),
    "verl": Recipe(
        kind="debootstrap",
        version="2",  # 2: the pip layer byte-compiled (pip_layer.compile_layer)
        suite="bookworm",
        include=("python3",),
        pip=VERL_PINS,
    ),
}
