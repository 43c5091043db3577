"""A member that exits while its node's stream is down: its job reads ended only once its final
log is stored (docs/node-backend.md, "Logs"). Over real gRPC and TLS on loopback: the real
gateway (``NodeGateway``), the real daemon link (``NodeLink``) and agent, the real supervisor
and coordinator; the engine is simulated, and its final log is held back (a slow engine) until
the control plane has looked at the job after the reconnect's Hello."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from grpclib.server import Server

from adapters.grpc.node_client import NodeLink, StoredCredential, save_credential
from adapters.grpc.node_gateway import NodeGateway
from adapters.memory.journal import MemoryJournal
from adapters.sim.node_runtime import SimRuntime
from adapters.sim.nodes import SimNodeBackend
from adapters.tls import client_context, ensure_dev_pki, server_context
from application import enrollment, jobs, submissions
from application.context import Context
from application.gang import GangCoordinator, GangSettings
from application.node_agent import NodeAgent
from application.node_control import NodeControl
from application.supervisor import Supervisor
from domain.fleet import Pool
from domain.lifecycle import JOB_FINAL, JobState
from domain.node_protocol import NodeCapacity, Phase
from tests.fixtures.server import free_port
from tests.support.context import ADMIN, ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.integration

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
CAP = NodeCapacity(0, None, 4.0, 8192)
OUTPUT = b"epoch 3: loss 0.01\n"


async def until(what: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if await what():
                return
            await asyncio.sleep(0.02)


async def test_an_exit_told_by_the_hello_waits_for_its_final_log(tmp_path: Path) -> None:
    ctx: Context = dataclasses.replace(
        memory_context(tmp_path, pools=(POOL,), nodes=0), coordinated={"node": SimNodeBackend()}
    )
    secret, _ = await enrollment.create_join_token(ctx, ADMIN, POOL.name, "n1")
    done = await enrollment.enroll(ctx, secret, "n1", CAP, "127.0.0.1")
    pki = ensure_dev_pki(tmp_path, ["127.0.0.1"])
    gateway = NodeGateway(NodeControl(ctx, "gw0"), poll=0.05)
    server = Server([gateway])
    port = free_port()
    await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
    state = tmp_path / "node"
    save_credential(state, StoredCredential("n1", POOL.name, done.credential, done.credential_id))
    runtime = SimRuntime("n1")
    agent = NodeAgent("n1", MemoryJournal(), runtime, _unconnected)
    link = NodeLink(
        host="127.0.0.1", port=port, tls=client_context(pki.ca.cert), state_dir=state,
        agent=agent, capacity=CAP, address="127.0.0.1", version="test",
        watch_seconds=0.05, retry_max=0.2,
    )  # fmt: skip
    agent.send = link.send
    gangs = GangCoordinator(ctx, GangSettings(prepare_timeout=timedelta(seconds=60)))
    supervisor = Supervisor(ctx, gangs=gangs)
    tasks = [asyncio.create_task(gateway.run()), asyncio.create_task(link.run())]
    try:
        job_id = await _submit(ctx)

        async def running() -> bool:
            await supervisor.tick()
            return bool(runtime.running())

        await until(running)
        [container] = runtime.running()
        member = container.order.ref

        # the daemon's stream dies; the member exits meanwhile (journalled, said to nobody)
        tasks[1].cancel()
        await asyncio.gather(tasks[1], return_exceptions=True)
        agent.send = _unconnected
        runtime.finish(member.member_id, 0, OUTPUT)
        await agent.watch_once()
        entry = agent.journal.get(member.member_id)
        assert entry is not None and entry.phase is Phase.EXITED
        container.log_gate = asyncio.Event()  # the engine is slow to give the log from now on

        # the daemon connects again: its Hello tells the exit, its log waits on the engine
        agent.send = link.send
        tasks[1] = asyncio.create_task(link.run())
        await asyncio.wait_for(container.log_asked.wait(), 30)  # welcomed: the Hello was read
        for _ in range(3):
            await supervisor.tick()
        assert await _state(ctx, job_id) not in JOB_FINAL, "ended before its final log came"

        container.log_gate.set()

        async def ended() -> bool:
            await supervisor.tick()
            return await _state(ctx, job_id) in JOB_FINAL

        await until(ended)
        assert await _state(ctx, job_id) is JobState.SUCCEEDED
        async with ctx.units.jobs() as uow:
            stored = await uow.logs.get(member.attempt_id, member.index)
        assert stored is not None and stored[0] == OUTPUT[-ctx.limits.max_log_bytes :]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await agent.close()
        server.close()
        await server.wait_closed()


async def _unconnected(body: Any) -> None:
    raise ConnectionError("not connected")


async def _submit(ctx: Context) -> str:
    intent = an_intent(profiles=("nodes/cpu:1",), params={"command": "train"})
    preview = await submissions.create_preview(ctx, ALICE, intent)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def _state(ctx: Context, job_id: str) -> JobState:
    return (await jobs.get_job(ctx, ADMIN, job_id)).job.state
