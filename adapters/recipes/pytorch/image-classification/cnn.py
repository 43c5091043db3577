"""The integration artifact of `pytorch/image-classification`: a small CNN learns the orientation
of a bar (horizontal, vertical, diagonal, anti-diagonal) in generated noisy images, with Adam.

PyTorch on the CPU (the `python-torch` runtime: Debian's python3-torch 1.13). Reads its
parameters from the Job Capsule's `config.json` (or $CONFIG). Writes, per step, `train/loss`
and `train/accuracy` as TensorBoard scalars (in $TUNEPLANE_METRICS_DIR, or under the outputs),
and at the end `checkpoint.pt` (the model's state dict and the step) and `report.json` (its
accuracy on held-out images) in $TUNEPLANE_OUTPUT_DIR.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from tb_events import EventWriter  # beside this file in the capsule (the recipe's include)
from torch import nn

CONFIG = json.loads(Path(os.environ.get("CONFIG", "/tuneplane/capsule/config.json")).read_text())
OUT = Path(os.environ.get("TUNEPLANE_OUTPUT_DIR", "outputs"))
METRICS = Path(os.environ.get("TUNEPLANE_METRICS_DIR", OUT / "tensorboard"))
CLASSES = ("horizontal", "vertical", "diagonal", "anti-diagonal")


def bars(
    n: int, size: int, noise: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images (n, 1, size, size): one bar of a random class and offset, plus noise."""
    label = torch.randint(0, len(CLASSES), (n,), generator=gen)
    offset = torch.randint(2, size - 2, (n, 1, 1), generator=gen)
    r = torch.arange(size).view(1, size, 1)
    c = torch.arange(size).view(1, 1, size)
    masks = torch.stack([
        (r == offset).expand(n, size, size),
        (c == offset).expand(n, size, size),
        (r - c == offset - size // 2),
        (r + c == offset + size // 2),
    ], dim=1)  # fmt: skip
    image = masks[torch.arange(n), label].float()
    image = image + noise * torch.randn(n, size, size, generator=gen)
    return image.unsqueeze(1), label


def model(channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * channels, len(CLASSES)),
    )  # fmt: skip


def main() -> None:
    train, data = CONFIG["train"], CONFIG["data"]
    steps, seed, batch = int(train["steps"]), int(train["seed"]), int(train["batch_size"])
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    gen = torch.Generator().manual_seed(seed)
    size, noise = int(data["image_size"]), float(data["noise"])
    x, y = bars(int(data["samples"]), size, noise, gen)
    test_x, test_y = bars(1024, size, noise, gen)
    net = model(int(CONFIG["model"]["channels"]))
    opt = torch.optim.Adam(net.parameters(), lr=float(CONFIG["optimizer"]["lr"]))
    loss_fn = nn.CrossEntropyLoss()
    events = EventWriter(METRICS)
    for step in range(1, steps + 1):
        pick = torch.randint(0, len(x), (min(batch, len(x)),), generator=gen)
        logits = net(x[pick])
        loss = loss_fn(logits, y[pick])
        opt.zero_grad()
        loss.backward()
        opt.step()
        accuracy = (logits.argmax(1) == y[pick]).float().mean().item()
        events.scalars(step, {"train/loss": loss.item(), "train/accuracy": accuracy})
        if step % 50 == 0 or step == steps:
            print(f"step {step}: loss {loss.item():.4f} accuracy {accuracy:.3f}", flush=True)
    with torch.no_grad():
        test_accuracy = (net(test_x).argmax(1) == test_y).float().mean().item()
    OUT.mkdir(parents=True, exist_ok=True)
    torch.save({"step": steps, "model": net.state_dict()}, OUT / "checkpoint.pt")
    report = {"steps": steps, "seed": seed, "loss": loss.item(), "test_accuracy": test_accuracy,
              "torch": torch.__version__}  # fmt: skip
    (OUT / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"final: test accuracy {test_accuracy:.3f} (torch {torch.__version__})", flush=True)


if __name__ == "__main__":
    main()
