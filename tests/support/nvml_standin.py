"""A stand-in for the ``pynvml`` module built FROM a recording (tests/fixtures/nvml/): the
functions ``NvmlProbe`` calls, answering what the recorded GPUs said, with the real module's
error classes and constants. ``NvmlProbe`` over it passes the same contract as the recorded
probe (tests/contract/test_gpu_probe_contract.py): the mapping code of the NVML adapter is
tested without a GPU. What NVML itself answers on a real GPU is checked by the same contract
run against ``pynvml`` where one is present (deploy/gpu/check.sh)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from adapters.gpu.records import RecordedGpu, Recording

MIB = 1024 * 1024


@dataclass
class _Memory:
    total: int
    free: int
    used: int


@dataclass
class _Utilization:
    gpu: int
    memory: int


def _not_supported() -> pynvml.NVMLError:
    return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


class NvmlStandIn:
    """``pynvml`` as a host with the recorded GPUs answers it. ``broken`` GPU indices raise
    NVML_ERROR_GPU_IS_LOST on every call (a GPU fallen off the bus)."""

    NVMLError = pynvml.NVMLError
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS

    def __init__(self, rec: Recording, broken: frozenset[int] = frozenset()) -> None:
        self.rec = rec
        self.broken = broken
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.rec.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> RecordedGpu:
        if not 0 <= index < len(self.rec.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.rec.gpus[index]

    def _live(self, g: RecordedGpu) -> RecordedGpu:
        if g.index in self.broken:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return g

    def nvmlDeviceGetUUID(self, h: RecordedGpu) -> str:
        return self._live(h).uuid

    def nvmlDeviceGetName(self, h: RecordedGpu) -> str:
        return self._live(h).name

    def nvmlDeviceGetMemoryInfo(self, h: RecordedGpu) -> _Memory:
        g = self._live(h)
        used = int((g.memory_used_mb or 0) * MIB)
        return _Memory(g.memory_mb * MIB, g.memory_mb * MIB - used, used)

    def nvmlDeviceGetMigMode(self, h: RecordedGpu) -> list[int]:
        mode = int(self._live(h).mig)
        return [mode, mode]

    def nvmlDeviceGetNvLinkState(self, h: RecordedGpu, link: int) -> int:
        if not self._live(h).nvlink:
            raise _not_supported()  # what NVML answers on a GPU without NVLink
        if link >= 18:  # Hopper has 18
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.rec.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, _, minor = self.rec.cuda.partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    def nvmlDeviceGetUtilizationRates(self, h: RecordedGpu) -> _Utilization:
        g = self._live(h)
        if g.utilization is None:  # e.g. a GPU in MIG mode
            raise _not_supported()
        return _Utilization(int(g.utilization), 0)

    def nvmlDeviceGetPowerUsage(self, h: RecordedGpu) -> int:
        g = self._live(h)
        if g.power_w is None:
            raise _not_supported()
        return round(g.power_w * 1000)

    def nvmlDeviceGetTemperature(self, h: RecordedGpu, sensor: Any) -> int:
        g = self._live(h)
        if g.temperature_c is None or sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _not_supported()
        return int(g.temperature_c)
