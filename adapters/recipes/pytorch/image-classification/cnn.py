"""The integration artifact of `pytorch/image-classification`: a small CNN learns the orientation
of a bar (horizontal, vertical, diagonal, anti-diagonal) in generated noisy images, with Adam.

PyTorch on the CPU (the `python-torch` runtime: Debian's python3-torch 1.13). Reads its
parameters from the Job Capsule's `config.json` (or $CONFIG). Writes, per step, `train/loss`
and `train/accuracy` as TensorBoard scalars (in $TUNEPLANE_METRICS_DIR, or under the outputs),
and at the end `checkpoint.pt` (the model's state dict and the step) and `report.json` (its
accuracy on held-out images) in $TUNEPLANE_OUTPUT_DIR.

Under TunePlane's checkpoint contract (docs/checkpoints.md: $TUNEPLANE_CHECKPOINT_DIR set) it
also writes a checkpoint every CHECKPOINT_EVERY steps and at the end — the model, Adam's state
and both random generators' states — marked complete with the SDK (`report.checkpoint`), and
from $TUNEPLANE_RESUME_FROM it goes on at the step after that checkpoint's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import report  # the SDK (adapters/sdk/report.py), beside this file in the capsule
import torch
from tb_events import EventWriter  # beside this file in the capsule (the recipe's include)
from torch import nn

CONFIG = json.loads(Path(os.environ.get("CONFIG", "/tuneplane/capsule/config.json")).read_text())
OUT = Path(os.environ.get("TUNEPLANE_OUTPUT_DIR", "outputs"))
METRICS = Path(os.environ.get("TUNEPLANE_METRICS_DIR", OUT / "tensorboard"))
CLASSES = ("horizontal", "vertical", "diagonal", "anti-diagonal")
CHECKPOINT_EVERY = 50


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


def save(step: int, net: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator) -> None:
    """A checkpoint at ``step``, marked complete last (docs/checkpoints.md)."""
    where = report.checkpoint_dir() / f"checkpoint-{step}"
    where.mkdir(parents=True, exist_ok=True)
    state = {"step": step, "model": net.state_dict(), "optimizer": opt.state_dict(),
             "data_rng": gen.get_state(), "torch_rng": torch.get_rng_state()}  # fmt: skip
    torch.save(state, where / "state.pt")
    report.checkpoint(where, step)


def resume(net: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator) -> int:
    """The step the checkpoint in $TUNEPLANE_RESUME_FROM reached (its state loaded), else 0."""
    where = report.resume_from()
    if where is None:
        return 0
    state = torch.load(where / "state.pt")
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    gen.set_state(state["data_rng"])
    torch.set_rng_state(state["torch_rng"])
    print(f"resumed from {where} at step {state['step']}", flush=True)
    return int(state["step"])


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
    checkpoints = bool(os.environ.get("TUNEPLANE_CHECKPOINT_DIR"))
    done = resume(net, opt, gen) if checkpoints else 0
    events = EventWriter(METRICS)
    loss = torch.tensor(float("nan"))
    for step in range(done + 1, steps + 1):
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
        if checkpoints and (step % CHECKPOINT_EVERY == 0 or step == steps):
            save(step, net, opt, gen)
    with torch.no_grad():
        test_accuracy = (net(test_x).argmax(1) == test_y).float().mean().item()
    OUT.mkdir(parents=True, exist_ok=True)
    torch.save({"step": steps, "model": net.state_dict()}, OUT / "checkpoint.pt")
    summary = {"steps": steps, "seed": seed, "loss": loss.item(), "test_accuracy": test_accuracy,
               "torch": torch.__version__}  # fmt: skip
    (OUT / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"final: test accuracy {test_accuracy:.3f} (torch {torch.__version__})", flush=True)


if __name__ == "__main__":
    main()
