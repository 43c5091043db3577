"""deploy/gpu/check.sh in CPU mode (the proof run's CI form, deploy/gpu/README.md): the same
script that proves TunePlane on a GPU machine trains once bare, starts `tp up` with the
host-process executor, runs the PyTorch training as a job, and checks what came back; here on
the CPU, with the node's GPUs from the recorded H200 (tests/fixtures/nvml/h200.txt). Every check
that can be made on a CPU must pass: the job, the loss curve through `tp job metrics` and the
raw inspector equal to what torch's SummaryWriter wrote, the member bound to one UUID of the
recording, its sys/gpu0/utilization series (the recording's values); the step time ratio says
"not checked (CPU mode)". The trl/sft recipe runs as a second job: as on the GPU machines,
whose Python has no TRL, the training Python here is that PyTorch without TRL and what only TRL
needs, and check.sh installs TRL from the carried wheels (`--train-wheels`).

Needs a CPU PyTorch that the member account can run: `export TUNEPLANE_TORCH_PYTHON="$(bash
deploy/dev/torch-env.sh)"`, and the TRL wheels: `export TUNEPLANE_TRAIN_WHEELS="$(bash
deploy/gpu/train-wheels.sh DIR --python-version 3.11)"` (deploy/dev/test.sh does both); skipped
without the first, saying so; without the second, TRL is the one in that PyTorch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = os.environ.get("TUNEPLANE_TORCH_PYTHON", "")
TRAIN_WHEELS = os.environ.get("TUNEPLANE_TRAIN_WHEELS", "")
# what the GPU machines lack for trl/sft (deploy/gpu/README.md), as site-packages names it
NOT_THERE = {"trl", "datasets", "dill", "multiprocess", "_multiprocess"}


@pytest.fixture
def training_python() -> Iterator[tuple[str, list[str]]]:
    """The Python that trains and check.sh's TRL arguments: with the carried wheels, a view of
    TUNEPLANE_TORCH_PYTHON's environment without TRL (a venv of the same base Python whose
    site-packages links every entry of it but TRL's; outside /tmp, readable by the member
    account), and a fresh TUNEPLANE_TRAIN_SITE_ROOT for check.sh to install them in."""
    if not TRAIN_WHEELS:
        yield TORCH_PYTHON, []
        return
    root = Path(tempfile.mkdtemp(prefix="tuneplane-notrl-", dir="/var/tmp"))
    try:
        root.chmod(0o755)
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(root / "env")],
                       check=True)  # fmt: skip
        ver = subprocess.run(
            [TORCH_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        site = Path(TORCH_PYTHON).parent.parent / "lib" / f"python{ver}" / "site-packages"
        view = root / "env" / "lib" / f"python{ver}" / "site-packages"
        for entry in site.iterdir():
            if entry.name.split("-")[0].lower() not in NOT_THERE:
                (view / entry.name).symlink_to(entry)
        subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
        python = str(root / "env" / "bin" / "python3")
        lacks = subprocess.run([python, "-c", "import trl"], capture_output=True)
        assert lacks.returncode != 0, "the view still imports trl"
        os.environ["TUNEPLANE_TRAIN_SITE_ROOT"] = str(root / "sites")
        yield python, ["--train-wheels", TRAIN_WHEELS]
    finally:
        os.environ.pop("TUNEPLANE_TRAIN_SITE_ROOT", None)
        shutil.rmtree(root, ignore_errors=True)


NOT_CPU = "not checked (CPU mode)"
UTILIZATION = "GPU utilisation > 0 in the member's system series"


@pytest.mark.skipif(
    not TORCH_PYTHON,
    reason="no PyTorch for members: "
    'export TUNEPLANE_TORCH_PYTHON="$(bash deploy/dev/torch-env.sh)"',
)
def test_the_proof_run_in_cpu_mode_passes_what_a_cpu_can_check(
    tmp_path: Path, training_python: tuple[str, list[str]]
) -> None:
    report = tmp_path / "report.json"
    python, trl_args = training_python
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update({k: v for k, v in os.environ.items() if k == "TUNEPLANE_TRAIN_SITE_ROOT"})
    proc = subprocess.run(
        ["bash", "deploy/gpu/check.sh", "--cpu", "--python", python, *trl_args,
         "--state-dir", str(tmp_path / "state"), "--report", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    said = f"{proc.stdout}\n{proc.stderr[-3000:]}"
    assert report.exists(), said
    result = json.loads(report.read_text())
    checks = {c["name"].split(" (")[0]: c for c in result["checks"]}
    assert result["ok"] and proc.returncode == 0, said
    assert checks["job succeeded"]["status"] == "passed", said
    loss = checks["the loss curve through TunePlane equals what the script wrote"]
    assert loss["status"] == "passed", said
    assert loss["detail"].startswith("15/15 points equal"), loss  # every logged step, exactly
    # the node reads a recorded H200 (TUNEPLANE_FAKE_NVML): the job asked for h200:1 and got one
    # UUID of the recording
    assert result["figures"]["profile"] == "h200:1", said
    assert checks["the member saw exactly its GPU"]["status"] == "passed", said
    assert "GPU-" in checks["the member saw exactly its GPU"]["detail"]
    # the node's collector sampled the recorded GPU for the member: its sys/gpu0/utilization
    assert checks[UTILIZATION]["status"] == "passed", said
    assert not checks[UTILIZATION]["detail"].startswith("0 samples")
    assert checks["step time through TunePlane / bare ≤ 1.02"]["status"] == NOT_CPU
    assert checks["the real NVML and nvidia-smi probes pass the GPU probe contract"]["status"] == (
        NOT_CPU
    )
    # the trl/sft recipe ran on the same h200:1 through the host-process executor, on a runtime
    # registered from that Python's own versions; with the wheels carried, TRL came from them
    # (the training Python has none, and the runner checks trl==1.16.0 in the member)
    trl = checks["trl/sft"]
    assert trl["status"] == "passed", (trl, result.get("trl"), said)
    if trl_args:
        assert "TRL 1.16.0, carried in" in proc.stderr, said
    assert result["figures"]["mode"] == "cpu"
    assert result["figures"]["step_time_bare_s"] > 0
    assert result["figures"]["step_time_tuneplane_s"] > 0
    # and everything was stopped: no process names the state directory any more (`tp up`,
    # its gateways, the node daemon, its collector, the private PostgreSQL, the member)
    assert not _holding(str(tmp_path / "state")), said


def _holding(path: str) -> list[str]:
    """The processes whose command line or environment names ``path``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if path.encode() in seen and int(proc.name) != os.getpid():
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            found.append(command.decode(errors="replace"))
    return found
