"""TEMPORARY (issue 23, branch gpu-telemetry): a ``GpuProbe`` answering from an
``nvidia-smi -q -x`` file, so the collector's GPU sampling can be tested and demonstrated
before the real NVML adapter and its recorded fake land (``adapters/node/nvml.py``, written on
another branch). At the merge the lead replaces every use of this module with that fake and
deletes it: it parses only what the sampler reads, and answers every read with the file's
values (a recording is one instant).

Used only under ``TUNEPLANE_FAKE_NVML=<file>`` (a test and demo setting, logged as a warning).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from domain.errors import InvalidInput
from domain.gpus import GpuDevice, GpuInventory, GpuReading

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def _number(node: ET.Element | None, path: str) -> float | None:
    found = node.find(path) if node is not None else None
    m = _NUMBER.match(found.text or "") if found is not None else None
    return float(m.group(1)) if m else None


class InterimRecordedProbe:
    def __init__(self, path: Path) -> None:
        try:
            root = ET.fromstring(path.read_bytes())
        except (OSError, ET.ParseError) as exc:
            raise InvalidInput(
                f"TUNEPLANE_FAKE_NVML={path}: not a readable nvidia-smi -q -x file ({exc})",
                fix="name a file written by `nvidia-smi -q -x`, or unset TUNEPLANE_FAKE_NVML",
                field="TUNEPLANE_FAKE_NVML",
            ) from None
        gpus = root.findall("gpu")
        self._inventory = GpuInventory(
            tuple(
                GpuDevice(
                    i,
                    (g.findtext("uuid") or "").strip(),
                    (g.findtext("product_name") or "").strip(),
                    int(_number(g, "fb_memory_usage/total") or 0),
                    (g.findtext("mig_mode/current_mode") or "").strip() == "Enabled",
                )
                for i, g in enumerate(gpus)
            ),
            (root.findtext("driver_version") or "").strip(),
            (root.findtext("cuda_version") or "").strip(),
            "nvidia-smi",
        )
        self._readings = {
            i: GpuReading(
                i,
                _number(g, "utilization/gpu_util"),
                _number(g, "fb_memory_usage/used"),
                _number(g, "power_readings/power_draw")
                if g.find("power_readings/power_draw") is not None
                else _number(g, "gpu_power_readings/power_draw"),
                _number(g, "temperature/gpu_temp"),
            )
            for i, g in enumerate(gpus)
        }

    def inventory(self) -> GpuInventory:
        return self._inventory

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        return [self._readings.get(i, GpuReading(i)) for i in indices]

    def close(self) -> None:
        return None
