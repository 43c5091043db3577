"""GPUs as a node sees them: the inventory it reports with its capacity, and the readings its
collector samples for the GPUs bound to each member (docs/fleet.md, docs/telemetry.md).

Pure: the adapters (``adapters/gpu/nvml.py``, NVML through ``nvidia-ml-py``, with
``nvidia-smi`` as the fallback) fill these in; the fake in the tests answers from recorded
``nvidia-smi -q -x`` outputs of real machines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

_VENDOR = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU of the host, by its index in the driver's (PCI bus) order."""

    index: int
    uuid: str  # "GPU-…": how a member's GPUs are bound (CUDA_VISIBLE_DEVICES)
    name: str  # the driver's product name, e.g. "NVIDIA H200"
    memory_mb: int
    mig: bool = False  # MIG mode is enabled (the GPU is split into instances)
    nvlink: bool = False  # at least one NVLink link is active


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """The host's GPUs and the driver that runs them."""

    devices: tuple[GpuDevice, ...] = ()
    driver: str = ""  # driver version, e.g. "580.159.03"
    cuda: str = ""  # the newest CUDA version the driver supports, e.g. "13.0"
    source: str = ""  # how it was read: "nvml", "nvidia-smi", "recorded" (the fake), "" (none)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One sample of one GPU. None: the driver does not report that quantity for it."""

    index: int  # the host's index of the GPU
    utilization: float | None = None  # percent of the last sample period a kernel ran
    memory_used_mb: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None


class GpuProbe(Protocol):
    """The host's GPUs: what they are, and samples of their use. Calls are blocking (NVML is a
    C library); callers run them off the event loop."""

    def inventory(self) -> GpuInventory: ...

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        """A reading of each GPU named, in the order given; a GPU that cannot be read (gone,
        fallen off the bus) gets a reading of Nones rather than failing the others."""
        ...

    def close(self) -> None: ...


def model_name(name: str) -> str:
    """The driver's product name as a short model, as pools name GPUs: "NVIDIA H200" → "h200",
    "NVIDIA A100-SXM4-80GB" → "a100", "NVIDIA GeForce RTX 4090" → "rtx4090"."""
    words = _VENDOR.sub(" ", name).replace("-", " ").lower().split()
    if not words:
        return "gpu"
    if words[0] in ("rtx", "gtx") and len(words) > 1:
        return words[0] + words[1]
    return re.sub(r"[^a-z0-9]", "", words[0]) or "gpu"


def one_model(inventory: GpuInventory) -> tuple[int, str | None]:
    """How many GPUs of one model the host offers, and the model: (0, None) without GPUs or
    with GPUs of several models (a pool is one model: the operator says which)."""
    models = {model_name(d.name) for d in inventory.devices}
    if len(models) != 1:
        return 0, None
    return len(inventory.devices), models.pop()
