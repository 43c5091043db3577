"""The proof run's workload (deploy/gpu/check.sh): a small MLP on synthetic data, trained on
the GPU (or the CPU), writing ``train/loss`` and ``train/step_time`` with PyTorch's own
``torch.utils.tensorboard.SummaryWriter``.

    python3 train.py [--metrics-dir DIR] [--report FILE] [--steps N] [--size gpu|cpu]

Metrics go to ``$TUNEPLANE_METRICS_DIR`` under TunePlane (``--metrics-dir`` run bare); the
report (a JSON object: the device it saw, CUDA_VISIBLE_DEVICES, the logged losses by step as
TensorBoard stores them, float32, and the step times) to ``--report``, else
``$TUNEPLANE_OUTPUT_DIR/train-report.json``; its last stdout line is ``TRAIN_REPORT <json>``
without the losses, so the check can read it in the job's log. Sized to about a minute on one
H100/H200 (``--size gpu``, the default when CUDA is there) and a few seconds on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

SIZES = {  # width, depth, batch, steps
    "gpu": (4096, 6, 8192, 6000),
    "cpu": (128, 3, 128, 150),
}
LOG_EVERY = 10  # steps per logged point (a .item() there syncs the device)
WARMUP = 50  # steps not counted in the step time (kernel selection, allocator)


def f32(x: float) -> float:
    """``x`` as TensorBoard stores a scalar (float32)."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def device_info(device: torch.device) -> dict[str, object]:
    info: dict[str, object] = {
        "device": device.type,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        info["gpu_name"] = props.name
        info["gpu_uuid"] = "GPU-" + str(props.uuid)  # as nvidia-smi and NVML write it
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics-dir", type=Path)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--size", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (CPU mode: 1)")
    args = parser.parse_args()
    metrics = args.metrics_dir or os.environ.get("TUNEPLANE_METRICS_DIR")
    report_path = args.report or (
        Path(os.environ["TUNEPLANE_OUTPUT_DIR"]) / "train-report.json"
        if os.environ.get("TUNEPLANE_OUTPUT_DIR")
        else None
    )
    if not metrics or report_path is None:
        print("error: no metrics directory or report file (fix: run under TunePlane, or pass "
              "--metrics-dir and --report)", file=sys.stderr)  # fmt: skip
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size = args.size or ("gpu" if device.type == "cuda" else "cpu")
    width, depth, batch, steps = SIZES[size]
    steps = args.steps or steps
    info = device_info(device)
    print(f"device: {json.dumps(info)}", flush=True)

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    # a fixed synthetic regression task: y = sin(x · w) for a hidden w
    hidden = torch.randn(width, 1, device=device) / width**0.5
    writer = SummaryWriter(log_dir=str(metrics))
    losses: dict[int, float] = {}
    times: list[float] = []
    window = time.perf_counter()
    for step in range(1, steps + 1):
        x = torch.randn(batch, width, device=device)
        y = torch.sin(x @ hidden)
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            loss = nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % LOG_EVERY == 0:
            value = loss.item()  # waits for the device
            now = time.perf_counter()
            step_time = (now - window) / LOG_EVERY
            window = now
            writer.add_scalar("train/loss", value, step)
            writer.add_scalar("train/step_time", step_time, step)
            losses[step] = f32(value)
            if step > WARMUP:
                times.append(step_time)
    writer.close()
    times.sort()
    summary = {
        **info,
        "size": size,
        "steps": steps,
        "logged": len(losses),
        "final_loss": losses[max(losses)] if losses else None,
        "step_time_median_s": times[len(times) // 2] if times else None,
        "step_time_mean_s": sum(times) / len(times) if times else None,
    }
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps({**summary, "losses": losses}))
    print(f"TRAIN_REPORT {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
