"""The example in docs/examples/mlp, end to end on the local backend: the `python-numpy`
runtime built by the project, its recipe locked with the runtime's NumPy version (checked at
preview and by the runner), `tp submit` of the example as it is, a real training run (an
MLP learns two spirals with Adam), its TensorBoard file read by TensorBoard's own loader, and
its checkpoint and report recorded and verified (`tp artifacts verify`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tests.e2e.test_walkthrough import Cli, job_id_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)
def test_the_example_trains_and_its_artifacts_verify(
    numpy_runtime: str, cli: Cli, tmp_path: Path
) -> None:
    shutil.copytree(ROOT / "docs/examples/mlp", cli.cwd / "mlp")
    cli("recipe", "upgrade", "mlp")  # as the README says: lock the recipe and its NumPy
    lock = json.loads((cli.cwd / "mlp" / "recipe.lock.json").read_text())
    assert (lock["framework"], lock["framework_version"]) == ("numpy", "1.24.2"), lock
    cli("validate", "mlp")
    out = cli("submit", "mlp", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=300)
    logs = cli("job", "logs", job_id).stdout
    assert job["state"] == "succeeded", logs

    listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
    files = {f["path"] for f in listed["members"][0]["files"]}
    assert {"checkpoint.npz", "report.json"} <= files
    (events,) = [f for f in files if f.startswith("tensorboard/events.out.tfevents.")]
    assert "3 files match manifest" in cli("artifacts", "verify", job_id).stdout

    (outputs,) = (tmp_path / "state" / "outputs" / job_id).glob("*/0")
    report = json.loads((outputs / "report.json").read_text())
    assert report["steps"] == 400 and report["accuracy"] > 0.9, report
    assert f"accuracy {report['accuracy']:.3f}" in logs
    checkpoint = np.load(outputs / "checkpoint.npz")
    assert int(checkpoint["step"]) == 400 and checkpoint["w1"].shape == (2, 64)

    loaded = list(EventFileLoader(str(outputs / events)).Load())  # TensorBoard's own reader
    assert loaded[0].file_version == "brain.Event:2" and len(loaded) == 401
    loss = [v.tensor.float_val[0] for e in loaded[1:] for v in e.summary.value
            if v.tag == "train/loss"]  # fmt: skip
    assert len(loss) == 400 and np.mean(loss[-50:]) < np.mean(loss[:50]) / 5
