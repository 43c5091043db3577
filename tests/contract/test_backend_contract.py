"""The ExecutionBackend contract, run against the real Docker engine, the Slurm backend on a real
Slurm cluster (tests/fixtures/slurm.py) and the in-memory backend, so that the simulator's backend
cannot drift from what a real one does."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import BUSYBOX
from adapters.memory.backend import MemoryBackend
from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from domain.catalog import RuntimePin
from domain.errors import NotFound
from domain.ports import ExecutionBackend, LaunchRequest, Observation
from tests.fixtures.docker import make_request, remove_labelled

pytestmark = pytest.mark.contract

SLEEP = ("/bin/sh", "-c", "echo started; sleep 600")
FAIL = ("/bin/sh", "-c", "echo out; echo err >&2; exit 3")


def _fate(request: LaunchRequest) -> tuple[int, bytes] | None:
    """The in-memory backend's stand-in for running the two commands above."""
    return (3, b"out\nerr\n") if request.spec.command == FAIL else None


@dataclass
class Subject:
    backend: ExecutionBackend
    pin: RuntimePin
    job_id: str

    def request(self, command: tuple[str, ...], index: int = 0) -> LaunchRequest:
        return make_request(self.job_id, self.pin, command, member_index=index)


@pytest.fixture(params=["memory", "docker", "slurm"])
async def subject(
    request: pytest.FixtureRequest, docker_host: str, tmp_path: Path
) -> AsyncIterator[Subject]:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    backend: Any
    if request.param == "memory":
        backend = MemoryBackend(behaviour=_fate)
        yield Subject(backend, await backend.pin(BUSYBOX), job_id)
        return
    if request.param == "slurm":
        cluster = request.getfixturevalue("slurm_cluster")
        client = SlurmClient(SlurmEndpoint(f"unix:{cluster.socket}"))
        backend = SlurmBackend(client, tmp_path / "shared", partitions={"local": "debug"})
        try:
            yield Subject(backend, await backend.pin(BUSYBOX), job_id)
        finally:
            for handle in (await backend.held()).values():
                await backend.stop(handle, 0)
            await backend.close()
        return
    host = docker_host
    backend = DockerBackend(host)
    try:
        yield Subject(backend, await backend.pin(BUSYBOX), job_id)
    finally:
        await remove_labelled(host, job_id)
        await backend.close()


async def _until(backend: ExecutionBackend, handle: str, status: str) -> Observation:
    deadline = time.monotonic() + 30
    while (obs := await backend.observe(handle)).status != status:
        assert time.monotonic() < deadline, f"{handle} stayed {obs}"
        await asyncio.sleep(0.05)
    return obs


async def _logs(backend: ExecutionBackend, handle: str) -> bytes:
    return b"".join([c async for c in backend.logs(handle, follow=False)])


async def test_launch_is_idempotent_per_member(subject: Subject) -> None:
    req = subject.request(SLEEP)
    first = await subject.backend.launch(req)
    assert await subject.backend.launch(req) == first
    other = await subject.backend.launch(subject.request(SLEEP, index=1))
    assert other != first
    assert (await _until(subject.backend, first, "running")).exit_code is None


async def test_exit_code_and_both_streams(subject: Subject) -> None:
    handle = await subject.backend.launch(subject.request(FAIL))
    obs = await _until(subject.backend, handle, "exited")
    assert obs.exit_code == 3
    logs = await _logs(subject.backend, handle)
    assert b"out" in logs and b"err" in logs


async def test_stop_release_and_what_follows(subject: Subject) -> None:
    b = subject.backend
    handle = await b.launch(subject.request(SLEEP))
    await _until(b, handle, "running")
    await b.stop(handle, grace_seconds=10)
    assert (await _until(b, handle, "exited")).exit_code == 128 + 15
    await b.stop(handle, grace_seconds=10)  # idempotent
    await b.release(handle)
    await b.release(handle)  # idempotent
    assert (await b.observe(handle)).status == "missing"
    with pytest.raises(NotFound):
        await _logs(b, handle)
    await b.stop(handle, grace_seconds=1)  # a missing member is fine to stop


async def test_unknown_handle_is_missing(subject: Subject) -> None:
    assert (await subject.backend.observe("tp-no-such-member")).status == "missing"


async def test_held_lists_members_until_released(subject: Subject) -> None:
    b = subject.backend
    req = subject.request(FAIL)
    handle = await b.launch(req)
    await _until(b, handle, "exited")
    assert (await b.held()).get(req.member_id) == handle  # exited but not released: held
    await b.release(handle)
    assert req.member_id not in await b.held()
