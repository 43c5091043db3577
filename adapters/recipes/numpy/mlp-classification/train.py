"""The integration artifact of `numpy/mlp-classification`: a two-layer MLP learns two
interleaved spirals with Adam.

NumPy only (the `python-numpy` runtime). Reads its parameters from the Job Capsule's
`config.json` (or $CONFIG). Writes, per step, `train/loss` and `train/accuracy` as TensorBoard
scalars (an event file in $TUNEPLANE_METRICS_DIR, or under the outputs), and at the end a
checkpoint (`checkpoint.npz`) and `report.json` in $TUNEPLANE_OUTPUT_DIR, which TunePlane
records with a manifest (`tp artifacts ls|verify`).

Under TunePlane's checkpoint contract (docs/checkpoints.md: $TUNEPLANE_CHECKPOINT_DIR set) it
also writes a checkpoint every CHECKPOINT_EVERY steps and at the end — parameters, Adam's state
and the random generator's state, so that a resumed run takes exactly the steps an uninterrupted
one would — and marks it complete with the SDK (`report.checkpoint`); from
$TUNEPLANE_RESUME_FROM it goes on at the step after that checkpoint's, and its curves go on
from there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import report  # the SDK (adapters/sdk/report.py), beside this file in the capsule
from tb_events import EventWriter  # beside this file in the capsule (the recipe's include)

CONFIG = json.loads(Path(os.environ.get("CONFIG", "/tuneplane/capsule/config.json")).read_text())
OUT = Path(os.environ.get("TUNEPLANE_OUTPUT_DIR", "outputs"))
METRICS = Path(os.environ.get("TUNEPLANE_METRICS_DIR", OUT / "tensorboard"))
CHECKPOINT_EVERY = 100


# -- the model -------------------------------------------------------------------------------


def spirals(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    t = np.sqrt(rng.uniform(0, 1, n)) * 3 * np.pi
    label = rng.integers(0, 2, n)
    sign = np.where(label == 0, 1.0, -1.0)
    x = np.stack([sign * t * np.cos(t), sign * t * np.sin(t)], axis=1) / (3 * np.pi)
    return x + rng.normal(0, 0.03, x.shape), label


def init(rng: np.random.Generator, hidden: int) -> dict[str, np.ndarray]:
    return {
        "w1": rng.normal(0, np.sqrt(2 / 2), (2, hidden)), "b1": np.zeros(hidden),
        "w2": rng.normal(0, np.sqrt(2 / hidden), (hidden, hidden)), "b2": np.zeros(hidden),
        "w3": rng.normal(0, np.sqrt(1 / hidden), (hidden, 2)), "b3": np.zeros(2),
    }  # fmt: skip


def activation(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The activation and its derivative."""
    if CONFIG["model"]["activation"] == "tanh":
        a = np.tanh(z)
        return a, 1 - a * a
    return np.maximum(0, z), (z > 0).astype(z.dtype)


def forward_backward(
    p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[float, float, dict[str, np.ndarray]]:
    h1, g1 = activation(x @ p["w1"] + p["b1"])
    h2, g2 = activation(h1 @ p["w2"] + p["b2"])
    logits = h2 @ p["w3"] + p["b3"]
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.log(prob[np.arange(len(y)), y] + 1e-12).mean()
    accuracy = (prob.argmax(axis=1) == y).mean()
    d = prob.copy()
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    grads = {"w3": h2.T @ d, "b3": d.sum(0)}
    d2 = (d @ p["w3"].T) * g2
    grads |= {"w2": h1.T @ d2, "b2": d2.sum(0)}
    d1 = (d2 @ p["w2"].T) * g1
    grads |= {"w1": x.T @ d1, "b1": d1.sum(0)}
    return float(loss), float(accuracy), grads


class Adam:
    def __init__(self, params: dict[str, np.ndarray], lr: float = 0.01) -> None:
        self.lr, self.t = lr, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for k, g in grads.items():
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            m_hat, v_hat = self.m[k] / (1 - 0.9**self.t), self.v[k] / (1 - 0.999**self.t)
            params[k] -= self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)


def save(step: int, params: dict[str, np.ndarray], opt: Adam, rng: np.random.Generator) -> None:
    """A checkpoint at ``step``, marked complete last (docs/checkpoints.md)."""
    where = report.checkpoint_dir() / f"checkpoint-{step}"
    where.mkdir(parents=True, exist_ok=True)
    arrays = {f"p.{k}": v for k, v in params.items()}
    arrays |= {f"m.{k}": v for k, v in opt.m.items()} | {f"v.{k}": v for k, v in opt.v.items()}
    np.savez(where / "state.npz", **arrays)  # type: ignore[arg-type]
    state = {"step": step, "adam_t": opt.t, "rng": rng.bit_generator.state}
    (where / "state.json").write_text(json.dumps(state) + "\n")
    report.checkpoint(where, step)


def resume(params: dict[str, np.ndarray], opt: Adam, rng: np.random.Generator) -> int:
    """The step the checkpoint in $TUNEPLANE_RESUME_FROM reached (its state loaded), else 0."""
    where = report.resume_from()
    if where is None:
        return 0
    state = json.loads((where / "state.json").read_text())
    with np.load(where / "state.npz") as arrays:
        for k in params:
            params[k][...] = arrays[f"p.{k}"]
            opt.m[k], opt.v[k] = arrays[f"m.{k}"].copy(), arrays[f"v.{k}"].copy()
    opt.t = int(state["adam_t"])
    rng.bit_generator.state = state["rng"]
    print(f"resumed from {where} at step {state['step']}", flush=True)
    return int(state["step"])


def main() -> None:
    train = CONFIG["train"]
    steps, seed = int(train["steps"]), int(train["seed"])
    rng = np.random.default_rng(seed)
    x, y = spirals(int(CONFIG["data"]["samples"]), rng)
    params = init(rng, int(CONFIG["model"]["hidden"]))
    opt = Adam(params, lr=float(CONFIG["optimizer"]["lr"]))
    checkpoints = bool(os.environ.get("TUNEPLANE_CHECKPOINT_DIR"))
    done = resume(params, opt, rng) if checkpoints else 0
    events = EventWriter(METRICS)
    batch_size = min(int(train["batch_size"]), len(x))
    for step in range(done + 1, steps + 1):
        batch = rng.choice(len(x), batch_size, replace=False)
        loss, accuracy, grads = forward_backward(params, x[batch], y[batch])
        opt.step(params, grads)
        events.scalars(step, {"train/loss": float(loss), "train/accuracy": float(accuracy)})
        if step % 100 == 0 or step == steps:
            print(f"step {step}: loss {loss:.4f} accuracy {accuracy:.3f}", flush=True)
        if checkpoints and (step % CHECKPOINT_EVERY == 0 or step == steps):
            save(step, params, opt, rng)
    loss, accuracy, _ = forward_backward(params, x, y)
    OUT.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"step": np.array(steps), **params}
    np.savez(OUT / "checkpoint.npz", **arrays)  # type: ignore[arg-type]
    report = {"steps": steps, "seed": seed, "loss": float(loss), "accuracy": float(accuracy)}
    (OUT / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"final: loss {loss:.4f} accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
