"""The host's GPUs through NVML (``nvidia-ml-py``), with ``nvidia-smi -q -x`` as the fallback
and recorded outputs as the fake: three ``domain.gpus.GpuProbe``s (docs/fleet.md#gpu-inventory).

``open_probe()`` picks one: the recording ``TUNEPLANE_FAKE_NVML`` names (a test and demo
setting, logged as a warning), else NVML if libnvidia-ml loads, else nvidia-smi if on PATH,
else a probe of no GPUs. A probe never raises out of ``inventory()`` or ``read()`` because a
GPU or the driver misbehaves: the daemon keeps running, with what could be read.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from adapters.gpu import records as gpu_records
from adapters.gpu.records import GpuRecordError, Recording
from domain.errors import InvalidInput
from domain.gpus import GpuDevice, GpuInventory, GpuProbe, GpuReading

log = logging.getLogger(__name__)

FAKE_ENV = "TUNEPLANE_FAKE_NVML"
SMI_TIMEOUT_S = 20.0


def cuda_version(v: int) -> str:
    """nvmlSystemGetCudaDriverVersion's integer as CUDA writes it: 13000 → "13.0"."""
    return f"{v // 1000}.{(v % 1000) // 10}" if v > 0 else ""


def _inventory(rec: Recording, source: str) -> GpuInventory:
    devices = tuple(
        GpuDevice(g.index, g.uuid, g.name, g.memory_mb, g.mig, g.nvlink) for g in rec.gpus
    )
    return GpuInventory(devices, rec.driver, rec.cuda, source if devices else "")


def _readings(rec: Recording, indices: Sequence[int]) -> list[GpuReading]:
    by_index = {g.index: g for g in rec.gpus}
    out = []
    for i in indices:
        g = by_index.get(i)
        if g is None:
            out.append(GpuReading(i))
            continue
        used = g.memory_used_mb
        out.append(
            GpuReading(
                i,
                g.utilization,
                used if used is None or used <= g.memory_mb else None,
                g.power_w,
                g.temperature_c,
            )
        )
    return out


class NoGpus:
    """A host without GPUs (or whose GPUs cannot be read): an empty inventory."""

    def inventory(self) -> GpuInventory:
        return GpuInventory()

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        return [GpuReading(i) for i in indices]

    def close(self) -> None:
        pass


class RecordedProbe:
    """The fake: a recorded ``nvidia-smi -q -x`` (or capture) replayed; its readings are the
    recorded values. A file that is not one is refused at once, naming the file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with self.path.open("rb") as f:
                data = f.read(gpu_records.MAX_BYTES + 1)
            self.recording = gpu_records.parse(data)
        except (OSError, GpuRecordError) as e:
            raise InvalidInput(
                f"{FAKE_ENV}={path}: not a recorded nvidia-smi output ({e})",
                fix=f"point {FAKE_ENV} at an `nvidia-smi -q -x` file, e.g. "
                "tests/fixtures/nvml/h200.txt, or unset it to probe the real GPUs",
                field=FAKE_ENV,
            ) from None

    def inventory(self) -> GpuInventory:
        return _inventory(self.recording, "recorded")

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        return _readings(self.recording, indices)

    def close(self) -> None:
        pass


class SmiProbe:
    """``nvidia-smi -q -x`` (and ``nvlink -s`` for NVLink), run without a shell and with a
    timeout: the fallback where libnvidia-ml cannot be loaded. Each call runs it anew."""

    def __init__(self, binary: str, timeout: float = SMI_TIMEOUT_S) -> None:
        self.binary = binary
        self.timeout = timeout

    def _run(self, *args: str) -> str | None:
        try:
            done = subprocess.run(
                [self.binary, *args],
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            log.warning("%s %s took more than %.0f s: killed", self.binary, " ".join(args),
                        self.timeout)  # fmt: skip
            return None
        except OSError as e:
            log.warning("cannot run %s: %s", self.binary, e)
            return None
        if done.returncode != 0:
            return None
        return done.stdout[: gpu_records.MAX_BYTES + 1].decode("utf-8", "replace")

    def _recording(self) -> Recording | None:
        out = self._run("-q", "-x")
        if out is None:
            return None
        try:
            rec = gpu_records.parse(out)
        except GpuRecordError as e:
            log.warning("%s -q -x printed what cannot be read: %s", self.binary, e)
            return None
        links = self._run("nvlink", "-s")  # None: failed (no NVLink support): keep what -q said
        if links is None:
            return rec
        return gpu_records.with_nvlink(rec, gpu_records.parse_nvlink(links))

    def inventory(self) -> GpuInventory:
        rec = self._recording()
        return _inventory(rec, "nvidia-smi") if rec else GpuInventory()

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        out = self._run("-q", "-x")
        try:
            rec = gpu_records.parse(out) if out is not None else None
        except GpuRecordError:
            rec = None
        return _readings(rec, indices) if rec else [GpuReading(i) for i in indices]

    def close(self) -> None:
        pass


class NvmlProbe:
    """NVML through ``pynvml`` (package ``nvidia-ml-py``): initialised once, shut down by
    ``close()``. ``nvml`` is the module to use (tests give a stand-in built from a recording).
    A quantity the GPU does not support is None; a GPU that errors reads all None."""

    def __init__(self, nvml: ModuleType | Any) -> None:
        self.nvml = nvml
        self._lock = threading.Lock()  # NVML is thread-safe; init/shutdown counting is not ours
        nvml.nvmlInit()
        self._open = True

    def _optional(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def _nvlink(self, handle: Any) -> bool:
        # links past a GPU's last answer NotSupported (or InvalidArgument): the loop stops there
        for link in range(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                state = self.nvml.nvmlDeviceGetNvLinkState(handle, link)
                if state == self.nvml.NVML_FEATURE_ENABLED:
                    return True
            except self.nvml.NVMLError:  # NotSupported: no NVLink (or no link of that number)
                return False
        return False

    def _device(self, index: int) -> GpuDevice | None:
        n = self.nvml
        try:
            h = n.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(n.nvmlDeviceGetUUID(h))
            name = _text(n.nvmlDeviceGetName(h))
            memory = n.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
        except n.NVMLError as e:
            log.warning("GPU %d cannot be read through NVML: %s", index, e)
            return None
        mig = self._optional(n.nvmlDeviceGetMigMode, h)
        mig_on = bool(mig) and mig[0] == n.NVML_DEVICE_MIG_ENABLE
        return GpuDevice(index, uuid, name, int(memory), mig_on, self._nvlink(h))

    def inventory(self) -> GpuInventory:
        n = self.nvml
        with self._lock:
            try:
                count = n.nvmlDeviceGetCount()
            except n.NVMLError as e:
                log.warning("NVML cannot count the GPUs: %s", e)
                return GpuInventory()
            devices = tuple(d for i in range(count) if (d := self._device(i)) is not None)
            driver = self._optional(n.nvmlSystemGetDriverVersion)
            cuda = self._optional(n.nvmlSystemGetCudaDriverVersion)
        return GpuInventory(
            devices, _text(driver or ""), cuda_version(cuda or 0), "nvml" if devices else ""
        )

    def _reading(self, index: int) -> GpuReading:
        n = self.nvml
        try:
            h = n.nvmlDeviceGetHandleByIndex(index)
        except n.NVMLError:
            return GpuReading(index)
        util = self._optional(n.nvmlDeviceGetUtilizationRates, h)
        memory = self._optional(n.nvmlDeviceGetMemoryInfo, h)
        power = self._optional(n.nvmlDeviceGetPowerUsage, h)
        temp = self._optional(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        return GpuReading(
            index,
            float(util.gpu) if util is not None else None,
            memory.used / (1024 * 1024) if memory is not None else None,
            power / 1000.0 if power is not None else None,
            float(temp) if temp is not None else None,
        )

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        with self._lock:
            if not self._open:
                return [GpuReading(i) for i in indices]
            return [self._reading(i) for i in indices]

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                with contextlib.suppress(self.nvml.NVMLError):
                    self.nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _load_nvml() -> NvmlProbe | None:
    try:
        import pynvml
    except ImportError:  # pragma: no cover - a dependency; absent only in a broken install
        return None
    try:
        return NvmlProbe(pynvml)
    except pynvml.NVMLError as e:  # no libnvidia-ml, no driver, no GPU
        log.info("NVML is not available (%s): trying nvidia-smi", e)
        return None


def open_probe(fake: str | Path | None = None, nvidia_smi: str | None = None) -> GpuProbe:
    """The probe for this host: the recording ``fake`` names (``TUNEPLANE_FAKE_NVML``, through
    the settings), else NVML, else nvidia-smi (``nvidia_smi``: that binary; default: the one on
    PATH, and NVML is not tried), else none. Only a bad recording raises (InvalidInput)."""
    if fake:
        log.warning(
            "%s=%s: GPUs are READ FROM A RECORDING, not from this host (a test and demo "
            "setting)", FAKE_ENV, fake,
        )  # fmt: skip
        return RecordedProbe(fake)
    if nvidia_smi is None and (probe := _load_nvml()) is not None:
        return probe
    binary = nvidia_smi or shutil.which("nvidia-smi")
    if binary is not None:
        return SmiProbe(binary)
    return NoGpus()
