"""A runtime's environment on the Slurm nodes (TUNEPLANE_SLURM_RUNTIMES, docs/slurm.md "Runtimes
on Slurm"): members of a job on a mapped runtime find that directory first on PATH (its
``python3``, what the runner then checks against the contract); a node without it fails the
member as a runtime that does not satisfy the contract, before anything runs. The setting's
refusals. The real cluster with TRL: tests/e2e/test_post_training_slurm.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from adapters.docker.runtimes import PYTORCH_TRL
from adapters.slurm.script import member_script
from domain.capsule import runner_failure
from domain.ports import LaunchRequest
from domain.runtimes import pin_of
from entrypoints.slurm_wiring import backend_from_env, runtimes_of
from tests.unit.test_slurm_metrics import request, run_member

pytestmark = pytest.mark.unit


def trl_request(command: str) -> LaunchRequest:
    req = request(command)
    pin = pin_of(PYTORCH_TRL, "sha256:" + "cd" * 32)
    return dataclasses.replace(req, spec=dataclasses.replace(req.spec, runtime=pin))


def test_the_runtimes_directory_comes_first_and_the_jobs_env_after_it(tmp_path: Path) -> None:
    env_bin = tmp_path / "trl-env" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "python3").write_text('#!/bin/sh\necho runtime-python3 "$@"\n')
    (env_bin / "python3").chmod(0o755)
    req = trl_request("python3 -V; echo PATH=$PATH")
    script_dir = str(env_bin)
    text = member_script(req, str(tmp_path / "shared"), 29500, None, runtime_dir=script_dir)
    assert text.index(f"export PATH={script_dir}:") < text.index("export TUNEPLANE_JOB_ID=")
    rc, log, _ = run_member(tmp_path, req, None, runtime_dir=script_dir)
    assert rc == 0, log
    assert "runtime-python3 -V" in log and f"PATH={env_bin}:" in log, log

    # a job's own PATH is exported after the runtime's (as a container's env overrides its
    # image's): it decides
    own = dataclasses.replace(req.spec, env={"PATH": "/usr/bin:/bin"})
    rc, log, _ = run_member(tmp_path, dataclasses.replace(req, spec=own), None,
                            runtime_dir=script_dir)  # fmt: skip
    assert rc == 0 and "runtime-python3" not in log and "PATH=/usr/bin:/bin\n" in log, log


def test_a_node_without_the_runtimes_directory_fails_the_member_with_93(tmp_path: Path) -> None:
    req = trl_request("echo the command ran")
    rc, log, d = run_member(tmp_path, req, None, runtime_dir="/nonexistent/trl/bin")
    assert rc == 93 and "the command ran" not in log, log
    assert (
        "tuneplane-slurm: runtime pytorch-trl's directory /nonexistent/trl/bin is not on node"
        in log
    ), log
    assert (d / "member-0.exit").read_text().strip() == "93"  # read by the backend
    assert "does not satisfy" in (runner_failure(93) or "")


def test_a_hostile_directory_name_is_only_text(tmp_path: Path) -> None:
    hostile = f'/nonexistent/$(touch {tmp_path}/ran)/`id`/"x'
    rc, log, _ = run_member(tmp_path, trl_request("true"), None, runtime_dir=hostile)
    assert rc == 93 and f"directory {hostile} is not on node" in log, log
    assert not (tmp_path / "ran").exists()


def test_no_mapping_leaves_path_alone(tmp_path: Path) -> None:
    rc, log, _ = run_member(tmp_path, trl_request("echo PATH=$PATH"), None)
    assert rc == 0 and "trl" not in log.split("PATH=")[1], log


def test_the_setting() -> None:
    assert runtimes_of("") == {}
    assert runtimes_of(" pytorch-trl=/opt/trl/bin , verl=/opt/verl/bin") == {
        "pytorch-trl": "/opt/trl/bin",
        "verl": "/opt/verl/bin",
    }
    backend = backend_from_env(
        {
            "TUNEPLANE_SLURM_URL": "unix:/s.sock",
            "TUNEPLANE_SLURM_SHARED_DIR": "/tmp/tp-slurm-runtimes-test",
            "TUNEPLANE_SLURM_RUNTIMES": "pytorch-trl=/opt/trl/bin",
        }
    )
    assert backend is not None and backend.runtime_dirs == {"pytorch-trl": "/opt/trl/bin"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("pytorch-trl", "is not RUNTIME=DIRECTORY"),
        ("=/opt/x", "is not RUNTIME=DIRECTORY"),
        ("pytorch-trl=opt/trl/bin", "not an absolute directory"),
        ("pytorch-trl=/opt/a:/opt/b", "no ':'"),
        ("a=/x,a=/y", "names runtime a twice"),
    ],
)
def test_bad_runtime_settings_stop_serve_before_anything_is_made(
    raw: str, message: str, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    with pytest.raises(SystemExit, match="fix:") as caught:
        backend_from_env(
            {
                "TUNEPLANE_SLURM_URL": "unix:/s.sock",
                "TUNEPLANE_SLURM_SHARED_DIR": str(shared),
                "TUNEPLANE_SLURM_RUNTIMES": raw,
            }
        )
    assert message in str(caught.value) and not shared.exists()
