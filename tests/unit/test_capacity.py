"""Node capacity detection: nvidia-smi's CSV, model names, configured overrides."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from adapters.node.capacity import detect, host_memory_mb, model_name, parse_nvidia_smi
from domain.errors import InvalidInput

pytestmark = pytest.mark.unit

# The format of `nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader,
# nounits` (driver 550+): one line per GPU, comma and space separated, memory in MiB.
H200_X2 = """0, NVIDIA H200, GPU-6f2c1f0e-5a1b-4c3d-9e8f-0a1b2c3d4e5f, 143771
1, NVIDIA H200, GPU-7a3d2e1f-6b2c-4d4e-8f9a-1b2c3d4e5f60, 143771
"""


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


def test_parse() -> None:
    gpus = parse_nvidia_smi(H200_X2)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA H200" and gpus[0].memory_mb == 143771


def test_parse_rejects_other_formats() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_nvidia_smi("0, NVIDIA H200\n")


def _fake_smi(tmp_path: Path, output: str) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'EOT'\n{output}EOT\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_detect_reads_nvidia_smi(tmp_path: Path) -> None:
    cap = detect(nvidia_smi=_fake_smi(tmp_path, H200_X2), cpus=16, memory_mb=1000)
    assert (cap.gpus, cap.gpu_model, cap.cpus, cap.memory_mb) == (2, "h200", 16, 1000)


def test_configured_values_win(tmp_path: Path) -> None:
    cap = detect(gpus=8, gpu_model="h200", nvidia_smi=_fake_smi(tmp_path, H200_X2))
    assert (cap.gpus, cap.gpu_model) == (8, "h200")


def test_no_nvidia_smi_means_no_gpus(tmp_path: Path) -> None:
    cap = detect(nvidia_smi=str(tmp_path / "absent"))
    assert cap.gpus == 0 and cap.gpu_model is None and cap.cpus >= 1
    assert cap.memory_mb == host_memory_mb() > 0


def test_gpus_without_a_model_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="--gpu-model"):
        detect(gpus=2, nvidia_smi=str(tmp_path / "absent"))
