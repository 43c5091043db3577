"""The host's GPUs for the node's processes: the collector samples members' GPUs through it
(``adapters/gpu/nvml.py``: NVML, else nvidia-smi, else none). ``TUNEPLANE_FAKE_NVML=<recorded
nvidia-smi output>`` (tests and demos) makes them see that file's GPUs instead, with a warning."""

from __future__ import annotations

from adapters.gpu.nvml import open_probe
from domain.gpus import GpuProbe
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import NodeSettings


def open_gpu_probe() -> GpuProbe | None:
    """None where the host has no GPU (nothing to sample)."""
    probe = open_probe(load_one(NodeSettings, "fake_nvml"))
    if not probe.inventory().devices:
        probe.close()
        return None
    return probe
