"""`pytorch/image-classification` end to end on the local backend: the `python-torch` runtime
built by the project (Debian's PyTorch 1.13, CPU), `tp new` and `tp submit` of the recipe, a
real training run (a small CNN learns the orientation of bars in generated images), its
TensorBoard file read by TensorBoard's own loader, its checkpoint and report recorded and
verified (`tp artifacts verify`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.docker import build_image
from tests.fixtures.server import Servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def torch_runtime(docker_host: str) -> str:
    """The runtime image, built as docs/local-backend.md says; its image id."""
    return build_image("python-torch", docker_host)


@pytest.mark.timeout(1500)
def test_the_cnn_trains_and_its_artifacts_verify(
    torch_runtime: str, cli: Cli, tmp_path: Path
) -> None:
    cli("new", "cnn", "--method", "pytorch/image-classification")
    cli("validate", "cnn")
    out = cli("submit", "cnn", "--profile", "cpu:1", "--set", "steps=150", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=300)
    logs = cli("job", "logs", job_id).stdout
    assert job["state"] == "succeeded", logs
    assert job["spec"]["runtime"]["name"] == "python-torch"

    listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
    files = {f["path"] for f in listed["members"][0]["files"]}
    assert {"checkpoint.pt", "report.json"} <= files
    (events,) = [f for f in files if f.startswith("tensorboard/events.out.tfevents.")]
    assert "3 files match manifest" in cli("artifacts", "verify", job_id).stdout

    (outputs,) = (tmp_path / "state" / "outputs" / job_id).glob("*/0")
    report = json.loads((outputs / "report.json").read_text())
    assert report["steps"] == 150 and report["torch"].startswith("1.13"), report
    assert report["test_accuracy"] > 0.9, report
    assert f"test accuracy {report['test_accuracy']:.3f}" in logs

    loaded = list(EventFileLoader(str(outputs / events)).Load())  # TensorBoard's own reader
    loss = [v.tensor.float_val[0] for e in loaded[1:] for v in e.summary.value
            if v.tag == "train/loss"]  # fmt: skip
    assert len(loss) == 150 and sum(loss[-20:]) < sum(loss[:20]) / 5


@pytest.fixture(scope="session")
def trl_runtime(docker_host: str) -> str:
    """The `pytorch-trl` runtime image (deploy/images/build.sh pytorch-trl: cached); its id."""
    return build_image("pytorch-trl", docker_host)


GRPO_TINY = {"max_steps": "4", "logging_steps": "1", "bf16": "false", "synthetic_samples": "32",
             "per_device_train_batch_size": "4", "num_generations": "4",
             "max_completion_length": "6", "beta": "0.04", "save_steps": "2"}  # fmt: skip


@pytest.mark.timeout(900)
def test_trl_grpo_on_the_local_backend_logs_its_metrics_and_its_artifacts_verify(
    trl_runtime: str, cli: Cli, api_server: Servers, tmp_path: Path
) -> None:
    """`trl/grpo` through `tp submit` on the local backend (a container of the `pytorch-trl`
    image): the runner checks the contract in the container, TRL trains the tiny Llama, and
    since the local backend collects no metrics (docs/backends.md: `metrics` is `no` there) its
    TensorBoard file is in the member's outputs, recorded and verified with the model."""
    cli("new", "rl", "--method", "trl/grpo")
    cli("validate", "rl")
    sets = [a for k, v in GRPO_TINY.items() for a in ("--set", f"{k}={v}")]
    cli("submit", "rl", "--profile", "cpu:2", *sets, "--preview")
    (saved,) = (cli.cwd / ".tuneplane-data" / "submissions").glob("pv-*.json")
    out = cli("submit", "--commit", str(saved))
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=600)
    logs = cli("job", "logs", job_id).stdout
    assert job["state"] == "succeeded", (job["reason"], logs[-5000:])
    assert job["spec"]["runtime"]["name"] == "pytorch-trl"
    assert job["spec"]["runtime"]["digest"] == trl_runtime  # the image pinned, the one run
    assert "tuneplane-recipe: trl/grpo done after 4 steps" in logs, logs[-3000:]

    listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
    files = {f["path"] for f in listed["members"][0]["files"]}
    assert {"report.json", "model/tokenizer.json", "model/model.safetensors"} <= files, files
    # its checkpoints went to TUNEPLANE_CHECKPOINT_DIR (docs/checkpoints.md), marked complete,
    # for a later attempt to resume from: not among the outputs any more
    assert not any(f.startswith("checkpoints/") for f in files), files
    assert "tuneplane-recipe: resuming" not in logs  # a first attempt resumes from nothing
    kept = api_server.state_dir / "checkpoints" / job_id / "1" / "work"
    assert (kept / "checkpoint-2" / "COMPLETE").read_text() == "2\n"
    assert (kept / "checkpoint-4" / "COMPLETE").read_text() == "4\n"
    (events,) = [f for f in files if f.startswith("tensorboard/events.out.tfevents.")]
    verified = cli("artifacts", "verify", job_id).stdout
    assert f"{len(files)} files match manifest" in verified, verified

    (outputs,) = (tmp_path / "state" / "outputs" / job_id).glob("*/0")
    report = json.loads((outputs / "report.json").read_text())
    assert report["recipe"] == "trl/grpo" and report["global_step"] == 4, report
    tb = EventAccumulator(str(outputs / events))  # TensorBoard's own reader
    tb.Reload()
    primary = json.loads(cli("methods", "trl/grpo", "--json").stdout)["primary_metrics"]
    for tag in primary:  # every primary metric, at each step TRL logged (logging_steps=1)
        assert [s.step for s in tb.Scalars(tag)] == [1, 2, 3, 4], (tag, tb.Tags()["scalars"])
