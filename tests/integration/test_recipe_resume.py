"""The numpy/mlp-classification recipe resumes (issue 22 item 4): run as its capsule runs it
(its artifact files with the shared includes beside it, on this host's Python), dead after a
checkpoint and run again with TUNEPLANE_RESUME_FROM, it ends with exactly what an uninterrupted
run ends with, and its curve goes on from the step after the checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.recipes import load_recipe
from adapters.telemetry.events import TfEventsParser

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CONFIG = {
    "train": {"steps": 300, "batch_size": 64, "seed": 3},
    "optimizer": {"lr": 0.01},
    "model": {"hidden": 16, "activation": "tanh"},
    "data": {"samples": 256},
}


def artifact(tmp_path: Path) -> Path:
    """The recipe's files as its capsule ships them (train.py, tb_events.py, report.py)."""
    method = load_recipe(ROOT / "adapters/recipes/numpy/mlp-classification")
    where = tmp_path / "artifact"
    for name, data in method.artifact:
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_bytes(data)
    return where


def start(tmp_path: Path, run: str, resume: str = "") -> subprocess.Popen[str]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    env = {
        "PATH": os.environ["PATH"],
        "CONFIG": str(config),
        "TUNEPLANE_OUTPUT_DIR": str(tmp_path / run / "outputs"),
        "TUNEPLANE_METRICS_DIR": str(tmp_path / run / "metrics"),
        "TUNEPLANE_CHECKPOINT_DIR": str(tmp_path / run / "checkpoints"),
        "TUNEPLANE_RESUME_FROM": resume,
    }
    script = artifact(tmp_path) / "train.py"
    return subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def steps_logged(metrics: Path) -> list[int]:
    """The steps of train/loss in the run's TensorBoard event files, as the collector reads."""
    steps = []
    for path in sorted(metrics.rglob("events.out.tfevents.*")):
        parsed = TfEventsParser().feed(path.read_bytes(), 0, final=True)
        steps += [s.step for r in parsed.records for s in r.scalars if s.tag == "train/loss"]
    return steps


def test_dead_after_a_checkpoint_and_resumed_it_ends_as_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    straight = start(tmp_path, "straight")
    assert straight.wait(120) == 0, straight.stdout.read() if straight.stdout else ""
    expected = json.loads((tmp_path / "straight/outputs/report.json").read_text())

    # the run dies at step 200, after checkpoint-100 was marked complete: a file where
    # checkpoint-200 would go makes its save fail (a crash at a known point, with no timing)
    (tmp_path / "cut/checkpoints").mkdir(parents=True)
    (tmp_path / "cut/checkpoints/checkpoint-200").write_text("in the way")
    cut = start(tmp_path, "cut")
    assert cut.wait(120) != 0
    assert not (tmp_path / "cut/outputs/report.json").exists()
    done = sorted(p.name for p in (tmp_path / "cut/checkpoints").iterdir()
                  if (p / "COMPLETE").is_file())  # fmt: skip
    latest = tmp_path / "cut/checkpoints" / done[-1]

    again = start(tmp_path, "again", resume=str(latest))
    out = again.communicate(timeout=120)[0]
    assert again.returncode == 0, out
    assert f"resumed from {latest} at step {latest.name.removeprefix('checkpoint-')}" in out
    assert json.loads((tmp_path / "again/outputs/report.json").read_text()) == expected
    assert (tmp_path / "again/checkpoints/checkpoint-300/COMPLETE").read_text() == "300\n"
    resumed_at = int(latest.name.removeprefix("checkpoint-"))
    before = [s for s in steps_logged(tmp_path / "cut/metrics") if s <= resumed_at]
    after = steps_logged(tmp_path / "again/metrics")
    assert after == list(range(resumed_at + 1, 301))  # goes on from the checkpoint's step
    assert before + after == list(range(1, 301))  # one curve, no gap, no step twice
