"""The Job Capsule's runner in real containers (the BusyBox and python-numpy runtimes): a sound
capsule runs its command on its source; a changed file, a manifest other than the committed
one, a runtime that does not satisfy the contract (Python, a framework's version) or an image
other than the pinned one stop the member before the command runs, with the reason in its
observation and its log."""

from __future__ import annotations

import dataclasses
import io
import tarfile

import pytest

from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import PYTHON_NUMPY
from domain import capsule
from domain.capsule import CapsuleRef
from domain.catalog import RuntimePin
from domain.ports import LaunchRequest
from tests.fixtures.docker import make_request, wait_for_status
from tests.integration.test_docker_backend import read_logs, targz

pytestmark = pytest.mark.integration

SOURCE = targz({"data/hello.txt": b"from-the-archive\n"})
COMMAND = ("/bin/sh", "-c", "cat data/hello.txt; echo user-code-ran; pwd")


def with_capsule(
    request: LaunchRequest, *, source: bytes | None = SOURCE, pin: RuntimePin | None = None
) -> tuple[LaunchRequest, bytes]:
    spec = request.spec
    digest, tar = capsule.build(b"{}", spec.command, pin or spec.runtime, source)
    spec = dataclasses.replace(spec, capsule=CapsuleRef(digest, "sha256:" + "0" * 64, len(tar)))
    return dataclasses.replace(request, spec=spec, capsule=tar), tar


def replaced(tar: bytes, name: str, data: bytes) -> bytes:
    """The capsule tar with one file's bytes changed (its manifest left as it was)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(tar)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            content = src.extractfile(member) if member.isfile() else None
            if member.name == f"tuneplane/capsule/{name}":
                member.size = len(data)
                content = io.BytesIO(data)
            dst.addfile(member, content)
    return out.getvalue()


async def run(backend: DockerBackend, request: LaunchRequest) -> tuple[int | None, str, bytes]:
    handle = await backend.launch(request)
    obs = await wait_for_status(backend, handle, "exited", within=60)
    return obs.exit_code, obs.reason, await read_logs(backend, handle)


async def test_a_sound_capsule_runs_its_command_on_its_source(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request, _ = with_capsule(make_request(docker_job_id, busybox_pin, COMMAND))
    code, _, logs = await run(docker_backend, request)
    assert code == 0
    assert logs == b"from-the-archive\nuser-code-ran\n/workspace\n"


async def test_a_changed_source_byte_stops_the_member_before_its_command(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request, tar = with_capsule(make_request(docker_job_id, busybox_pin, COMMAND))
    changed = bytearray(SOURCE)
    changed[-20] ^= 1
    request = dataclasses.replace(request, capsule=replaced(tar, "source.tar.gz", bytes(changed)))
    code, reason, logs = await run(docker_backend, request)
    assert code == 92 and "changed since the commit" in reason
    assert b"changed since the commit: source.tar.gz" in logs
    assert b"user-code-ran" not in logs


async def test_a_manifest_other_than_the_committed_one_is_refused(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request, _ = with_capsule(make_request(docker_job_id, busybox_pin, COMMAND))
    assert request.spec.capsule is not None
    ref = dataclasses.replace(request.spec.capsule, digest="sha256:" + "1" * 64)
    request = dataclasses.replace(request, spec=dataclasses.replace(request.spec, capsule=ref))
    code, reason, logs = await run(docker_backend, request)
    assert code == 91 and "not the one committed" in reason
    assert b"not the committed sha256:1111" in logs and b"user-code-ran" not in logs


async def test_a_changed_command_is_caught_too(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request, tar = with_capsule(make_request(docker_job_id, busybox_pin, COMMAND))
    request = dataclasses.replace(request, capsule=replaced(tar, "entry.sh", b"echo other\n"))
    code, _, logs = await run(docker_backend, request)
    assert code == 92 and b"changed since the commit: entry.sh" in logs and b"other\n" not in logs


async def test_a_runtime_without_the_contract_s_python_is_refused(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    python = dataclasses.replace(busybox_pin, name="python", python="3.11")
    request, _ = with_capsule(make_request(docker_job_id, busybox_pin, COMMAND), pin=python)
    code, reason, logs = await run(docker_backend, request)  # the BusyBox image runs instead
    assert code == 93 and "runtime contract" in reason
    assert b"asks for Python 3.11; this runtime has no python3" in logs
    assert b"user-code-ran" not in logs


@pytest.fixture
async def numpy_pin(docker_backend: DockerBackend, numpy_runtime: str) -> RuntimePin:
    pin = await docker_backend.pin(PYTHON_NUMPY)
    assert pin.digest == numpy_runtime and pin.frameworks == {"numpy": "1.24.2"}
    return pin


async def test_a_runtime_with_the_contract_s_frameworks_runs_the_command(
    docker_backend: DockerBackend, numpy_pin: RuntimePin, docker_job_id: str
) -> None:
    request, _ = with_capsule(make_request(docker_job_id, numpy_pin, COMMAND))
    code, _, logs = await run(docker_backend, request)
    assert code == 0 and b"user-code-ran" in logs


async def test_a_framework_at_another_version_stops_the_member_before_its_command(
    docker_backend: DockerBackend, numpy_pin: RuntimePin, docker_job_id: str
) -> None:
    claims = dataclasses.replace(numpy_pin, frameworks={"numpy": "1.26.4"})  # the image: 1.24.2
    request, _ = with_capsule(make_request(docker_job_id, numpy_pin, COMMAND), pin=claims)
    code, reason, logs = await run(docker_backend, request)
    assert code == 95 and "framework versions" in reason
    assert b"the runtime contract pins numpy 1.26.4; this runtime has 1.24.2" in logs
    assert b"user-code-ran" not in logs


async def test_a_framework_the_runtime_lacks_stops_the_member(
    docker_backend: DockerBackend, numpy_pin: RuntimePin, docker_job_id: str
) -> None:
    claims = dataclasses.replace(numpy_pin, frameworks={"numpy": "1.24.2", "torch": "2.3.1"})
    request, _ = with_capsule(make_request(docker_job_id, numpy_pin, COMMAND), pin=claims)
    code, _, logs = await run(docker_backend, request)
    assert code == 95 and b"pins torch 2.3.1; this runtime has no torch" in logs
    assert b"user-code-ran" not in logs


async def test_an_image_other_than_the_capsule_s_is_refused(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    """The JobSpec's runtime digest swapped after the capsule was built: the member starts
    from another image than the one the capsule pins, and the runner says so."""
    pinned = dataclasses.replace(busybox_pin, digest="sha256:" + "e" * 64)
    request, _ = with_capsule(make_request(docker_job_id, busybox_pin, COMMAND), pin=pinned)
    code, reason, logs = await run(docker_backend, request)
    assert code == 96 and "another image" in reason
    assert f"the member runs image {busybox_pin.digest}; the capsule pins sha256:eeee".encode() in (
        logs
    )
    assert b"user-code-ran" not in logs
