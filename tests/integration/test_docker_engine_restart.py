"""Issue 22: a local member lost with its engine is ``node-lost``; one removed while the engine
ran on stays ``missing`` ("cancelled outside TunePlane: …"). Against the real engine, which
must not be restarted (it is shared): the backend talks to it through a socket served by a
process of the test's own (socat), and "the engine restarted and lost the container" is that
process replaced by a new one while the container is removed through the real engine. The
backend reads the start of the process serving its socket as the engine's start
(adapters/docker/ends.py), so this is the same evidence a restarted dockerd gives."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from adapters.docker.backend import DockerBackend
from adapters.docker.ends import engine_started_at
from adapters.docker.runtimes import BUSYBOX
from domain.ports import Observation
from tests.fixtures.docker import engine_call, make_request, remove_labelled, wait_for_status
from tests.support.engine_proxy import EngineProxy, served

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(docker_host: str, tmp_path: Path) -> Iterator[EngineProxy]:
    yield from served(docker_host, tmp_path / "engine.sock")


async def test_a_container_lost_with_a_restarted_engine_is_node_lost_a_removed_one_is_not(
    proxy: EngineProxy, docker_host: str
) -> None:
    job_id = f"job-test-{uuid.uuid4().hex[:12]}"
    backend = DockerBackend(f"unix://{proxy.path}")
    try:
        pin = await backend.pin(BUSYBOX)
        lost = await backend.launch(make_request(job_id, pin, ("sleep", "600")))
        removed = await backend.launch(make_request(job_id, pin, ("sleep", "600"), member_index=1))
        for handle in (lost, removed):
            await wait_for_status(backend, handle, "running")
        # `docker rm -f` behind TunePlane's back while the engine runs on: no proof of a loss
        await asyncio.to_thread(
            engine_call, docker_host, "DELETE", f"/containers/{removed}", {"force": "1"}
        )
        assert await backend.observe(removed) == Observation("missing")
        # the engine goes away, comes back without the container: lost with the engine
        proxy.stop()
        await asyncio.to_thread(
            engine_call, docker_host, "DELETE", f"/containers/{lost}", {"force": "1"}
        )
        proxy.start()
        engine = await asyncio.to_thread(engine_started_at, f"unix://{proxy.path}")
        assert engine is not None
        obs = await backend.observe(lost)
        assert (obs.status, obs.cause) == ("missing", "node-lost"), obs
        assert obs.reason.startswith("the container engine restarted at ")
        assert obs.reason.endswith("and no longer knows it: lost with the engine")
    finally:
        await remove_labelled(docker_host, job_id)
        await backend.close()


def _accepts(path: Path) -> bool:
    """Whether a server listens on the unix socket ``path``."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def test_an_engine_start_is_read_to_the_clock_tick(tmp_path: Path) -> None:
    """The start of the process serving the socket, as ``engine_started_at`` reads it, is no
    earlier than when the test launched it, give or take the kernel's clock tick (10 ms) and
    two clocks read apart: read with ``/proc/stat``'s whole-second ``btime`` it was up to a
    second early (a restart less than a second after a container's start was not taken for
    one after it)."""
    path = tmp_path / "engine.sock"
    serve = "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); "
    serve += "s.listen(); time.sleep(120)"
    before = datetime.now(UTC)
    server = subprocess.Popen([sys.executable, "-c", serve, str(path)])
    try:
        while not _accepts(path):  # listening, not only bound (a loaded CI run read between)
            assert server.poll() is None, "the socket's server died"
            time.sleep(0.01)
        started = engine_started_at(f"unix://{path}")
        assert started is not None
        assert before - timedelta(milliseconds=30) <= started <= datetime.now(UTC)
    finally:
        server.kill()
        server.wait()
