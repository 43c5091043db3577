"""The numpy and PyTorch recipes resume (issue 22 item 4): each run as its capsule runs it (its
artifact files with the shared includes beside it, on a Python with its framework), dead after a
checkpoint (a file where a later checkpoint would go makes that save fail: a crash at a known
step, with no timing) and run again with TUNEPLANE_RESUME_FROM, ends with exactly what an
uninterrupted run ends with, and its curve goes on from the step after the checkpoint. The TRL
recipes' resume is in tests/integration/test_trl_recipes.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.recipes import load_recipe
from adapters.telemetry.events import TfEventsParser

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = os.environ.get("TUNEPLANE_POST_TRAINING_PYTHON", "")  # CPU torch, among others


@dataclass(frozen=True)
class Case:
    recipe: str
    python: str
    config: dict[str, Any]
    steps: int
    every: int  # the recipe's checkpoint interval

    def __str__(self) -> str:
        return self.recipe


CASES = [
    Case("numpy/mlp-classification", sys.executable, {
        "train": {"steps": 300, "batch_size": 64, "seed": 3}, "optimizer": {"lr": 0.01},
        "model": {"hidden": 16, "activation": "tanh"}, "data": {"samples": 256},
    }, 300, 100),
    Case("pytorch/image-classification", TORCH_PYTHON, {
        "train": {"steps": 150, "batch_size": 32, "seed": 5}, "optimizer": {"lr": 0.003},
        "model": {"channels": 4}, "data": {"samples": 256, "image_size": 12, "noise": 0.3},
    }, 150, 50),
]  # fmt: skip


def start(case: Case, tmp_path: Path, run: str, resume: str = "") -> subprocess.Popen[str]:
    """The recipe's entry with its files laid out as in the capsule, in a run of its own."""
    method = load_recipe(ROOT / "adapters/recipes" / case.recipe)
    artifact = tmp_path / "artifact"
    for name, data in method.artifact:
        (artifact / name).parent.mkdir(parents=True, exist_ok=True)
        (artifact / name).write_bytes(data)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(case.config))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CONFIG": str(config),
        "TUNEPLANE_OUTPUT_DIR": str(tmp_path / run / "outputs"),
        "TUNEPLANE_METRICS_DIR": str(tmp_path / run / "metrics"),
        "TUNEPLANE_CHECKPOINT_DIR": str(tmp_path / run / "checkpoints"),
        "TUNEPLANE_RESUME_FROM": resume,
    }
    script = artifact / Path(method.entry[-1]).name
    return subprocess.Popen(
        [case.python, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def steps_logged(metrics: Path) -> list[int]:
    """The steps of train/loss in the run's TensorBoard event files, as the collector reads."""
    steps = []
    for path in sorted(metrics.rglob("events.out.tfevents.*")):
        parsed = TfEventsParser().feed(path.read_bytes(), 0, final=True)
        steps += [s.step for r in parsed.records for s in r.scalars if s.tag == "train/loss"]
    return steps


@pytest.mark.parametrize("case", CASES, ids=str)
def test_dead_after_a_checkpoint_and_resumed_it_ends_as_an_uninterrupted_run(
    case: Case, tmp_path: Path
) -> None:
    if not case.python:
        pytest.skip("no PyTorch: `export TUNEPLANE_POST_TRAINING_PYTHON="
                    "$(bash deploy/dev/post-training-env.sh)`")  # fmt: skip
    straight = start(case, tmp_path, "straight")
    out = straight.communicate(timeout=240)[0]
    assert straight.returncode == 0, out
    expected = json.loads((tmp_path / "straight/outputs/report.json").read_text())

    dies_at = 2 * case.every  # its save fails there: the run dies after checkpoint `every`
    (tmp_path / "cut/checkpoints").mkdir(parents=True)
    (tmp_path / f"cut/checkpoints/checkpoint-{dies_at}").write_text("in the way")
    cut = start(case, tmp_path, "cut")
    assert cut.wait(240) != 0
    assert not (tmp_path / "cut/outputs/report.json").exists()
    latest = tmp_path / f"cut/checkpoints/checkpoint-{case.every}"
    assert (latest / "COMPLETE").read_text() == f"{case.every}\n"

    again = start(case, tmp_path, "again", resume=str(latest))
    out = again.communicate(timeout=240)[0]
    assert again.returncode == 0, out
    assert f"resumed from {latest} at step {case.every}" in out
    assert json.loads((tmp_path / "again/outputs/report.json").read_text()) == expected
    last = tmp_path / f"again/checkpoints/checkpoint-{case.steps}/COMPLETE"
    assert last.read_text() == f"{case.steps}\n"
    before = [s for s in steps_logged(tmp_path / "cut/metrics") if s <= case.every]
    after = steps_logged(tmp_path / "again/metrics")
    assert after == list(range(case.every + 1, case.steps + 1))  # goes on from the checkpoint
    assert before + after == list(range(1, case.steps + 1))  # one curve, no gap, no step twice
