"""The host's GPUs for the node's processes (the collector samples members' GPUs through it).

``TUNEPLANE_FAKE_NVML=<nvidia-smi -q -x file>`` (tests and demos) makes them see that file's
GPUs instead, with a warning. Otherwise: no GPU probe yet on this branch.

MERGE NOTE (issue 23): the NVML adapter (``adapters/node/nvml.py``, ``open_probe()``) and its
recorded fake land on another branch; ``open_gpu_probe`` then returns ``open_probe()``, and the
interim probe below is replaced by that fake. The collector's import contract forbids
``adapters.node`` (pyproject.toml, "the collector start no backend"): the NVML adapter has to
live where the collector may import it, or the contract must name it as an exception.
"""

from __future__ import annotations

import logging

from adapters.telemetry.interim_gpu_probe import InterimRecordedProbe
from domain.gpus import GpuProbe
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import NodeSettings

log = logging.getLogger("tuneplane.gpus")


def open_gpu_probe() -> GpuProbe | None:
    fake = load_one(NodeSettings, "fake_nvml")
    if fake is not None:
        log.warning("TUNEPLANE_FAKE_NVML=%s: the GPUs recorded there, not this host's", fake)
        return InterimRecordedProbe(fake)
    return None
