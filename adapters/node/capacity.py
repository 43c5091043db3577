"""What a node offers: GPUs from nvidia-smi where present (else as configured), CPUs the
daemon may use, and memory from /proc/meminfo. Configured values override detection."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from domain.errors import InvalidInput
from domain.node_protocol import NodeCapacity

QUERY = "index,name,uuid,memory.total"
_VENDOR = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_mb: int


def model_name(name: str) -> str:
    """nvidia-smi's product name as a short model: "NVIDIA H200" → "h200",
    "NVIDIA A100-SXM4-80GB" → "a100", "NVIDIA GeForce RTX 4090" → "rtx4090"."""
    words = _VENDOR.sub(" ", name).replace("-", " ").lower().split()
    if not words:
        return "gpu"
    if words[0] in ("rtx", "gtx") and len(words) > 1:
        return words[0] + words[1]
    return re.sub(r"[^a-z0-9]", "", words[0]) or "gpu"


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Lines of ``nvidia-smi --query-gpu=index,name,uuid,memory.total
    --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        index, name, uuid, memory = parts
        gpus.append(Gpu(int(index), name, uuid, int(float(memory))))
    return gpus


def detect_gpus(nvidia_smi: str | None = None) -> list[Gpu]:
    """The GPUs nvidia-smi lists; [] where there is no nvidia-smi or no driver."""
    binary = nvidia_smi or shutil.which("nvidia-smi")
    if binary is None:
        return []
    try:
        out = subprocess.run(
            [binary, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out)


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
) -> NodeCapacity:
    """The node's capacity: detected, with any configured value taking precedence."""
    given = (("--gpus", gpus, 0), ("--cpus", cpus, 0.001), ("--memory-mb", memory_mb, 1))
    for flag, value, least in given:
        if value is not None and not (math.isfinite(value) and value >= least):
            raise InvalidInput(
                f"{flag} {value} is not a capacity this node can offer",
                fix=f"give {least} or more, or leave {flag} out to detect it",
                field=flag.removeprefix("--").replace("-", "_"),
            )
    found = detect_gpus(nvidia_smi) if gpus is None or gpu_model is None else []
    count = gpus if gpus is not None else len(found)
    model = gpu_model or (model_name(found[0].name) if found else None)
    if count and model is None:
        raise InvalidInput(
            f"{count} GPUs configured but their model is unknown (nvidia-smi found none)",
            fix="pass --gpu-model too, e.g. --gpu-model h200",
            field="gpu_model",
        )
    return NodeCapacity(
        gpus=count,
        gpu_model=model if count else None,
        cpus=cpus if cpus is not None else host_cpus(),
        memory_mb=memory_mb if memory_mb is not None else host_memory_mb(),
    )
