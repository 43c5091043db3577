"""Faults: the control plane dies while a job runs. The workload must not notice, and a new
control-plane process must pick the job up from PostgreSQL and the engine, finishing it with its
logs — a lost control process is never taken as proof that a workload stopped."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from typing import Any

import aiodocker
import httpx
import pytest

from tests.fixtures.server import Servers, ServersFactory, start_servers, stop_servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def _job(client: httpx.AsyncClient, url: str, job_id: str) -> dict[str, Any]:
    r = await client.get(f"{url}/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def _wait(
    client: httpx.AsyncClient, url: str, job_id: str, states: set[str]
) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while (job := await _job(client, url, job_id))["state"] not in states:
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.2)
    return job


async def test_job_survives_a_killed_control_plane(
    api_servers_factory: ServersFactory, pg_url: str, docker_host: str
) -> None:
    servers: Servers = await api_servers_factory(1)
    async with httpx.AsyncClient(headers=servers.headers, timeout=30) as client:
        intent = {
            "experiment": "survivor",
            "method": "custom/custom",
            "profile": "cpu:1",
            # runs until the test says so, then finishes normally
            "params": {"command": "echo before; while [ ! -e go ]; do sleep 0.2; done; echo after"},
        }
        p = (await client.post(f"{servers.url}/v1/previews", json=intent)).json()
        r = await client.post(
            f"{servers.url}/v1/jobs",
            json={"preview_id": p["id"], "digest": p["digest"], "retry_key": str(uuid.uuid4())},
        )
        job_id = r.json()["job_id"]
        job = await _wait(client, servers.url, job_id, {"running"})
        handle = job["attempts"][0]["members"][0]["handle"]

        servers.procs[0].send_signal(signal.SIGKILL)  # no goodbye, no cleanup
        servers.procs[0].wait(10)

        # the workload keeps running while no control plane exists
        async with aiodocker.Docker(url=docker_host) as docker:
            container = await docker.containers.get(handle)
            assert (await container.show())["State"]["Running"] is True
            # let it finish: the marker file appears in its working directory
            exec_ = await container.exec(["touch", "/workspace/go"])
            await exec_.start(detach=True)

        again = await asyncio.to_thread(start_servers, pg_url, docker_host, servers.state_dir, 1)
        try:
            done = await _wait(client, again.url, job_id, {"succeeded", "failed"})
            assert done["state"] == "succeeded", done
            assert [a["number"] for a in done["attempts"]] == [1]  # adopted, not relaunched
            logs = (await client.get(f"{again.url}/v1/jobs/{job_id}/logs")).text
            assert "before" in logs and "after" in logs
        finally:
            stop_servers(again)
