"""Contract: every ``domain.gpus.GpuProbe`` (adapters/gpu/nvml.py) — the recorded probe (the
fake) over each fixture of tests/fixtures/nvml/ (real H100, H200 and A100 outputs, README.md
there), ``NvmlProbe`` over a stand-in ``pynvml`` built from the same recordings, ``SmiProbe``
running a real executable that prints them, and, where a GPU is present, ``NvmlProbe`` over
the real ``pynvml`` and ``SmiProbe`` over the real ``nvidia-smi``."""

from __future__ import annotations

import re
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

from adapters.gpu import records as gpu_records
from adapters.gpu.nvml import NvmlProbe, RecordedProbe, SmiProbe
from domain.gpus import GpuProbe, GpuReading
from tests.support.nvml_standin import NvmlStandIn

pytestmark = pytest.mark.contract

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvml"


@dataclass(frozen=True)
class Expect:
    """What each recording says (read by hand from the file)."""

    name: str
    memory_mb: int
    mig: bool
    nvlink: bool
    driver: str
    cuda: str
    utilization: float | None
    memory_used_mb: float
    power_w: float
    temperature_c: float


EXPECT = {
    "a100-sxm4-80gb-mig.xml": Expect(
        "NVIDIA A100-SXM4-80GB", 81920, True, False, "535.54.03", "12.2", None, 50, 67.03, 27
    ),
    "h100-80gb-hbm3.txt": Expect(
        "NVIDIA H100 80GB HBM3", 81559, False, True, "590.48.01", "13.1", 100, 19818, 588.39, 59
    ),
    "h200.txt": Expect(
        "NVIDIA H200", 143771, False, True, "590.48.01", "13.1", 100, 32362, 625.24, 52
    ),
    "h200-mig.txt": Expect(
        "NVIDIA H200", 143771, True, False, "590.48.01", "13.1", None, 16959, 292.14, 36
    ),
}


def smi_stub(tmp: Path, fixture: Path) -> str:
    """A real executable in nvidia-smi's place: prints the recording for ``-q -x``, fails
    ``nvlink -s`` (the capture's own nvlink section then stands)."""
    script = tmp / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-q" ] && exec cat "{fixture}"\nexit 1\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def _nvml_loads() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


NO_GPU = (
    "no NVIDIA GPU on this machine (libnvidia-ml does not load / no nvidia-smi): the "
    "real adapters' contract runs on a GPU host (deploy/gpu/check.sh)"
)

Maker = Callable[[Path, Path], GpuProbe]
MAKERS: dict[str, Maker] = {
    "recorded": lambda tmp, f: RecordedProbe(f),
    "nvml-standin": lambda tmp, f: NvmlProbe(NvmlStandIn(gpu_records.parse(f.read_bytes()))),
    "smi-stub": lambda tmp, f: SmiProbe(smi_stub(tmp, f)),
}


@pytest.fixture(params=sorted(EXPECT))
def fixture_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=sorted(MAKERS))
def probe(request: pytest.FixtureRequest, fixture_name: str, tmp_path: Path) -> Iterator[GpuProbe]:
    p = MAKERS[request.param](tmp_path, FIXTURES / fixture_name)
    yield p
    p.close()


@pytest.fixture(params=["nvml", "nvidia-smi"])
def real_probe(request: pytest.FixtureRequest) -> Iterator[GpuProbe]:
    if request.param == "nvml":
        if not _nvml_loads():
            pytest.skip(NO_GPU)
        p: GpuProbe = NvmlProbe(pynvml)
    else:
        binary = shutil.which("nvidia-smi")
        if binary is None:
            pytest.skip(NO_GPU)
        p = SmiProbe(binary)
    yield p
    p.close()


# -- what every probe does -----------------------------------------------------------------


def check_well_formed(p: GpuProbe) -> None:
    inv = p.inventory()
    assert inv.devices, "a probe of a GPU host lists its GPUs"
    assert [d.index for d in inv.devices] == list(range(len(inv.devices)))
    uuids = [d.uuid for d in inv.devices]
    assert len(set(uuids)) == len(uuids)
    assert all(u.startswith("GPU-") for u in uuids)
    assert all(d.name.strip() and d.memory_mb > 0 for d in inv.devices)
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", inv.driver)
    assert re.fullmatch(r"\d+\.\d+", inv.cuda)
    assert inv.source in ("nvml", "nvidia-smi", "recorded")


def check_reads(p: GpuProbe) -> None:
    inv = p.inventory()
    indices = [d.index for d in inv.devices]
    asked = [*reversed(indices), indices[0]]
    readings = p.read(asked)
    assert [r.index for r in readings] == asked
    for r in readings:
        total = inv.devices[r.index].memory_mb
        assert r.memory_used_mb is None or 0 <= r.memory_used_mb <= total
        assert r.utilization is None or 0 <= r.utilization <= 100
        assert r.power_w is None or r.power_w >= 0
    assert p.read([len(indices) + 7]) == [GpuReading(len(indices) + 7)]
    assert p.read([]) == []


def test_inventory_is_well_formed(probe: GpuProbe) -> None:
    check_well_formed(probe)


def test_read_answers_each_index_asked_in_order(probe: GpuProbe) -> None:
    check_reads(probe)


def test_inventory_says_what_the_recording_says(probe: GpuProbe, fixture_name: str) -> None:
    e = EXPECT[fixture_name]
    inv = probe.inventory()
    assert [(d.name, d.memory_mb, d.mig, d.nvlink) for d in inv.devices] == [
        (e.name, e.memory_mb, e.mig, e.nvlink)
    ]
    assert (inv.driver, inv.cuda) == (e.driver, e.cuda)


def test_readings_are_the_recorded_values(probe: GpuProbe, fixture_name: str) -> None:
    e = EXPECT[fixture_name]
    [r] = probe.read([0])
    assert r.utilization == e.utilization
    assert r.memory_used_mb == pytest.approx(e.memory_used_mb, abs=1)
    assert r.power_w == pytest.approx(e.power_w, abs=0.001)
    assert r.temperature_c == e.temperature_c


def test_close_twice_then_read_gives_nones(probe: GpuProbe) -> None:
    probe.close()
    probe.close()
    assert [r.index for r in probe.read([0])] == [0]


def test_the_real_adapters_pass_the_contract_on_a_gpu_host(real_probe: GpuProbe) -> None:
    check_well_formed(real_probe)
    check_reads(real_probe)
