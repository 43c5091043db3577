"""What a node offers: GPUs from the GPU probe (NVML, else nvidia-smi, else the recording
``TUNEPLANE_FAKE_NVML`` names: adapters/gpu/nvml.py) where present, else as configured; CPUs
the daemon may use; memory from /proc/meminfo. Configured values override detection; the
detected inventory is reported beside them either way (docs/fleet.md#gpu-inventory)."""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

from adapters.gpu.nvml import open_probe
from domain.errors import InvalidInput
from domain.gpus import GpuInventory, GpuProbe, model_name
from domain.node_protocol import NodeCapacity


def detect_inventory(
    probe: GpuProbe | None = None,
    *,
    fake_nvml: str | Path | None = None,
    nvidia_smi: str | None = None,
) -> GpuInventory:
    """The host's GPUs: through ``probe`` (left open), or a probe opened and closed here."""
    if probe is not None:
        return probe.inventory()
    opened = open_probe(fake_nvml, nvidia_smi)
    try:
        return opened.inventory()
    finally:
        opened.close()


def host_cpus() -> float:
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return float(os.cpu_count() or 1)


def host_memory_mb(meminfo: str = "/proc/meminfo") -> int:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def detect(
    *,
    gpus: int | None = None,
    gpu_model: str | None = None,
    cpus: float | None = None,
    memory_mb: int | None = None,
    nvidia_smi: str | None = None,
    fake_nvml: str | Path | None = None,
    probe: GpuProbe | None = None,
) -> NodeCapacity:
    """The node's capacity: detected, with any configured value taking precedence. A host
    with GPUs of several models offers none of them by itself: ``--gpu-model`` (and
    ``--gpus``) must say which it offers (a pool is one model)."""
    given = (("--gpus", gpus, 0), ("--cpus", cpus, 0.001), ("--memory-mb", memory_mb, 1))
    for flag, value, least in given:
        if value is not None and not (math.isfinite(value) and value >= least):
            raise InvalidInput(
                f"{flag} {value} is not a capacity this node can offer",
                fix=f"give {least} or more, or leave {flag} out to detect it",
                field=flag.removeprefix("--").replace("-", "_"),
            )
    inventory = detect_inventory(probe, fake_nvml=fake_nvml, nvidia_smi=nvidia_smi)
    found = inventory.devices
    count = gpus if gpus is not None else len(found)
    models = Counter(model_name(d.name) for d in found)
    if gpu_model is None and len(models) > 1 and count:
        mix = ", ".join(f"{n}× {m}" for m, n in sorted(models.items()))
        raise InvalidInput(
            f"this host has GPUs of several models ({mix}): a node offers one model",
            fix="pass --gpu-model and --gpus to say which GPUs this node offers",
            field="gpu_model",
        )
    model = gpu_model or (next(iter(models)) if models else None)
    if count and model is None:
        raise InvalidInput(
            f"{count} GPUs configured but their model is unknown (no GPU was detected)",
            fix="pass --gpu-model too, e.g. --gpu-model h200",
            field="gpu_model",
        )
    return NodeCapacity(
        gpus=count,
        gpu_model=model if count else None,
        cpus=cpus if cpus is not None else host_cpus(),
        memory_mb=memory_mb if memory_mb is not None else host_memory_mb(),
        gpu_inventory=inventory if found else None,
    )
