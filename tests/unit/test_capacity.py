"""Node capacity detection: the GPU probe's inventory, model names, configured overrides,
mixed models."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from adapters.gpu import records as gpu_records
from adapters.node.capacity import detect, host_memory_mb
from domain.errors import InvalidInput
from domain.gpus import GpuDevice, GpuInventory, model_name, one_model
from tests.support.nvml_standin import NvmlStandIn

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvml"
A100 = FIXTURES / "a100-sxm4-80gb-mig.xml"  # a real `nvidia-smi -q -x` (README.md there)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA L40S", "l40s"),
    ],
)
def test_model_names(name: str, model: str) -> None:
    assert model_name(name) == model


def _fake_smi(tmp_path: Path, xml: Path) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-q" ] && exec cat "{xml}"\nexit 1\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_detect_reads_nvidia_smi(tmp_path: Path) -> None:
    cap = detect(nvidia_smi=_fake_smi(tmp_path, A100), cpus=16, memory_mb=1000)
    assert (cap.gpus, cap.gpu_model, cap.cpus, cap.memory_mb) == (1, "a100", 16, 1000)
    assert cap.gpu_inventory is not None and cap.gpu_inventory.source == "nvidia-smi"
    assert cap.gpu_inventory.devices[0].mig


def test_detect_reads_the_recording_the_fake_names() -> None:
    cap = detect(fake_nvml=FIXTURES / "h200.txt", nvidia_smi="/nonexistent")
    assert (cap.gpus, cap.gpu_model) == (1, "h200")
    assert cap.gpu_inventory is not None
    assert (cap.gpu_inventory.source, cap.gpu_inventory.cuda) == ("recorded", "13.1")


def test_configured_values_win_and_the_inventory_stays(tmp_path: Path) -> None:
    cap = detect(gpus=8, gpu_model="h200", nvidia_smi=_fake_smi(tmp_path, A100))
    assert (cap.gpus, cap.gpu_model) == (8, "h200")
    assert cap.gpu_inventory is not None and len(cap.gpu_inventory.devices) == 1


def _mixed() -> NvmlStandIn:
    h200 = gpu_records.parse((FIXTURES / "h200.txt").read_bytes())
    a100 = gpu_records.parse(A100.read_bytes()).gpus[0]
    gpus = (h200.gpus[0], gpu_records.RecordedGpu(1, a100.uuid, a100.name, a100.memory_mb))
    return NvmlStandIn(gpu_records.Recording(gpus, h200.driver, h200.cuda))


def test_a_host_of_mixed_models_must_say_which_it_offers() -> None:
    from adapters.gpu.nvml import NvmlProbe

    with pytest.raises(InvalidInput, match=r"several models \(1× a100, 1× h200\)") as e:
        detect(probe=NvmlProbe(_mixed()))
    assert e.value.field == "gpu_model" and "--gpu-model" in (e.value.fix or "")
    cap = detect(probe=NvmlProbe(_mixed()), gpus=1, gpu_model="h200")
    assert (cap.gpus, cap.gpu_model) == (1, "h200")
    assert cap.gpu_inventory is not None and len(cap.gpu_inventory.devices) == 2


def test_no_nvidia_smi_means_no_gpus(tmp_path: Path) -> None:
    cap = detect(nvidia_smi=str(tmp_path / "absent"))
    assert cap.gpus == 0 and cap.gpu_model is None and cap.cpus >= 1
    assert cap.gpu_inventory is None
    assert cap.memory_mb == host_memory_mb() > 0


def test_gpus_without_a_model_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="--gpu-model"):
        detect(gpus=2, nvidia_smi=str(tmp_path / "absent"))


def test_a_host_offers_its_gpus_only_when_they_are_of_one_model() -> None:
    def inventory(*names: str) -> GpuInventory:
        return GpuInventory(tuple(GpuDevice(i, f"GPU-{i}", n, 1) for i, n in enumerate(names)))

    assert one_model(inventory()) == (0, None)
    assert one_model(inventory("NVIDIA H200", "NVIDIA H200")) == (2, "h200")
    assert one_model(inventory("NVIDIA H200", "NVIDIA A100-SXM4-80GB")) == (0, None)
