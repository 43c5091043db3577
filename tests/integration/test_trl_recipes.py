"""The TRL recipes run for real: each artifact, exactly as the Job Capsule ships it (its files
and the config.json rendered from `--set` values), trains the tiny Llama it builds from a
config on generated data, on the CPU, with nothing downloaded; it logs every primary metric
its recipe declares to TensorBoard and saves the model and report.json in the outputs.

Needs a Python with TRL: `deploy/dev/test.sh` makes one (`deploy/dev/post-training-env.sh`) and
sets TUNEPLANE_POST_TRAINING_PYTHON; elsewhere these tests are skipped, saying so."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from adapters.recipes import load_recipes
from domain.catalog import Method, resolve_params

TRL_PYTHON = os.environ.get("TUNEPLANE_POST_TRAINING_PYTHON", "")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not TRL_PYTHON,
        reason="no TRL: `export TUNEPLANE_POST_TRAINING_PYTHON="
        "$(bash deploy/dev/post-training-env.sh)`",
    ),
]
TINY = {"max_steps": "4", "logging_steps": "1", "bf16": "false", "synthetic_samples": "32",
        "per_device_train_batch_size": "4", "learning_rate": "0.001",
        "save_steps": "2"}  # fmt: skip
RUNS = {
    "trl/sft": {"max_length": "32"},
    "trl/grpo": {"num_generations": "4", "max_completion_length": "6", "beta": "0.04"},
    "trl/dpo": {"max_length": "32", "lora_r": "4"},
}


def method(name: str) -> Method:
    (m,) = [m for m in load_recipes() if m.name == name]
    return m


def run(
    name: str, given: dict[str, str], tmp_path: Path, wrap: tuple[str, ...] = (), **extra: str
) -> subprocess.CompletedProcess[str]:
    """Lay out the capsule's artifact/ and config.json, and run the recipe's entry there
    (``extra``: more of the member's environment; ``wrap``: what starts it, e.g. the
    Kubernetes backend's checkpoint step)."""
    m = method(name)
    capsule = tmp_path / "capsule"
    (capsule / "artifact").mkdir(parents=True, exist_ok=True)
    for file, data in m.artifact:
        (capsule / "artifact" / file).write_bytes(data)
    (capsule / "config.json").write_text(json.dumps(m.config(resolve_params(m, dict(given)))))
    (tmp_path / "workspace").mkdir(exist_ok=True)
    entry = capsule / "artifact" / Path(m.entry[-1]).name
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CONFIG": str(capsule / "config.json"),
        "TUNEPLANE_OUTPUT_DIR": str(tmp_path / "outputs"),
        "TUNEPLANE_METRICS_DIR": str(tmp_path / "metrics"),
        "TUNEPLANE_WORKSPACE": str(tmp_path / "workspace"),
        "HF_HUB_OFFLINE": "1",  # nothing may be downloaded
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }
    return subprocess.run(
        [*wrap, TRL_PYTHON, str(entry)],
        cwd=tmp_path / "workspace",
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_recipe_trains_the_tiny_model_and_logs_its_primary_metrics(
    name: str, tmp_path: Path
) -> None:
    done = run(name, {**TINY, **RUNS[name]}, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    report = json.loads((tmp_path / "outputs" / "report.json").read_text())
    assert report["recipe"] == name and report["global_step"] == 4
    model = tmp_path / "outputs" / "model"
    weights = {"model.safetensors", "adapter_model.safetensors"} & {p.name for p in model.iterdir()}
    assert weights and (model / "tokenizer.json").is_file()
    assert (tmp_path / "outputs" / "checkpoints" / "checkpoint-2").is_dir()
    (events,) = (tmp_path / "metrics").glob("events.out.tfevents.*")
    tb = EventAccumulator(str(events))
    tb.Reload()
    logged = set(tb.Tags()["scalars"])
    assert set(method(name).primary_metrics) <= logged, sorted(logged)
    assert len(tb.Scalars("train/loss")) == 4  # logging_steps=1


def test_a_config_trl_would_refuse_stops_before_trl_starts(tmp_path: Path) -> None:
    done = run("trl/grpo", {**TINY, "per_device_train_batch_size": "3"}, tmp_path)
    assert done.returncode == 2
    assert "is not a multiple of num_generations (8)" in done.stderr
    assert "fix: make per_device_train_batch_size" in done.stderr
    assert not (tmp_path / "outputs").exists()


def test_sft_marks_its_checkpoints_and_a_later_attempt_resumes_from_one(tmp_path: Path) -> None:
    """Issue 22 item 4: under TunePlane's checkpoint contract the trainer saves into
    TUNEPLANE_CHECKPOINT_DIR and each checkpoint is marked COMPLETE; an attempt that died after
    checkpoint-2 (a file where checkpoint-4 would go makes that save fail) is resumed by the
    next from it, with TRL's own resume (optimizer, scheduler and RNG states), to step 4, its
    curve going on at step 3."""
    given = {**TINY, **RUNS["trl/sft"]}
    first = tmp_path / "attempt-1"
    (first / "checkpoints").mkdir(parents=True)
    (first / "checkpoints" / "checkpoint-4").write_text("in the way")
    died = run("trl/sft", given, first, TUNEPLANE_CHECKPOINT_DIR=str(first / "checkpoints"))
    assert died.returncode != 0
    saved = first / "checkpoints" / "checkpoint-2"
    assert (saved / "COMPLETE").read_text() == "2\n", died.stderr[-3000:]
    second = tmp_path / "attempt-2"
    done = run("trl/sft", given, second, TUNEPLANE_CHECKPOINT_DIR=str(second / "checkpoints"),
               TUNEPLANE_RESUME_FROM=str(saved))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert f"tuneplane-recipe: resuming from {saved}" in done.stdout
    assert json.loads((second / "outputs" / "report.json").read_text())["global_step"] == 4
    assert (second / "checkpoints" / "checkpoint-4" / "COMPLETE").read_text() == "4\n"
    (events,) = (second / "metrics").glob("events.out.tfevents.*")
    tb = EventAccumulator(str(events))
    tb.Reload()
    assert [e.step for e in tb.Scalars("train/loss")] == [3, 4]  # goes on after step 2
