"""A slurmrestd answer TunePlane cannot read is "Slurm does not answer" (docs/slurm.md): the
member is unknown, the capacity read skipped, never an end taken from it and never the control
loop stopped. A stand-in server on a real socket answers what no real slurmrestd does (a
proxy's page, a record without its fields, another job's end): faults, not Slurm's behaviour,
which tests/integration/test_slurm_rest.py pins against the real one."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adapters.memory.backend import MemoryBackend
from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from application import jobs, submissions
from application.supervisor import Supervisor
from domain.errors import Unavailable
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit

ANSWERS: dict[str, bytes] = {
    "a proxy's page": b"<html><body>sign in</body></html>",
    "a list": b"[1, 2, 3]",
    "a string": b'"hello"',
    "jobs not a list": b'{"jobs": "oops"}',
    "a job without its id": b'{"jobs": [{"job_state": "RUNNING"}]}',
    "a job id not a number": b'{"jobs": [{"job_id": "x12"}]}',
    "another job's end": b'{"jobs": [{"job_id": 999, "job_state": "COMPLETED", "exit_code": 0}]}',
}


class _Slurm(BaseHTTPRequestHandler):
    answer: dict[str, bytes]

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/openapi"):
            body = json.dumps({"paths": {"/slurm/v0.0.38/ping": {}}}).encode()
        elif self.path.endswith("/partitions"):
            body = b'{"partitions": [{"name": "debug", "nodes": "n1", "total_nodes": 1}]}'
        elif self.path.endswith("/nodes"):
            body = self.answer.get("nodes", b'{"nodes": [{"state": "idle", "cpus": 4}]}')
        else:
            body = self.answer["job"]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def slurm() -> Iterator[tuple[str, dict[str, bytes]]]:
    answer: dict[str, bytes] = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("S", (_Slurm,), {"answer": answer}))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("name", list(ANSWERS))
async def test_an_unreadable_job_answer_leaves_the_member_unknown(
    name: str, slurm: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    url, answer = slurm
    answer["job"] = ANSWERS[name]
    (tmp_path / "att1").mkdir()
    backend = SlurmBackend(SlurmClient(SlurmEndpoint(url)), tmp_path)
    try:
        seen = await backend.observe("12:0:att1")
    finally:
        await backend.close()
    assert seen.status == "unknown" and seen.exit_code is None, seen
    assert "Slurm does not answer" in seen.reason


async def test_an_unreadable_node_record_skips_the_capacity_and_the_loop_goes_on(
    slurm: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    url, answer = slurm
    answer["nodes"] = b'{"nodes": [{"state": "idle", "cpus": 4}]}'  # a node without its name
    client = SlurmClient(SlurmEndpoint(url))
    with pytest.raises(Unavailable, match="cannot read"):
        await client.nodes()
    await client.close()

    ctx = memory_context(tmp_path, MemoryBackend())
    slurm_backend = SlurmBackend(SlurmClient(SlurmEndpoint(url)), tmp_path / "shared")
    ctx = dataclasses.replace(ctx, capacity={"slurm": slurm_backend})
    preview = await submissions.create_preview(ctx, ALICE, an_intent(params={"command": "x"}))
    made = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    supervisor = Supervisor(ctx, capacity_every=1)  # the capacity read on every round
    try:
        for _ in range(3):
            await supervisor.tick()
    finally:
        await slurm_backend.close()
    assert (await jobs.get_job(ctx, ALICE, made.job_id)).job.state == "running"


async def test_a_fault_in_one_capacity_source_never_stops_the_rounds(tmp_path: Path) -> None:
    class Broken:
        name = "slurm"

        async def capacity(self) -> Any:
            raise KeyError("name")  # a bug in one backend's reader

    broken: Any = Broken()  # a CapacityReporter in all but its fault
    ctx = dataclasses.replace(memory_context(tmp_path, MemoryBackend()), capacity={"slurm": broken})
    preview = await submissions.create_preview(ctx, ALICE, an_intent(params={"command": "x"}))
    made = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    supervisor = Supervisor(ctx, capacity_every=1)
    for _ in range(3):
        await supervisor.tick()
    assert (await jobs.get_job(ctx, ALICE, made.job_id)).job.state == "running"
