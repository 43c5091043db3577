"""A node daemon whose container engine stops answering between its vote and the commit: the
member stays STARTING (never failed, never ended on the lost connection) with its container
created; when the control plane says the commit again (``command_for`` repeats it while a member
is held STARTING) and the engine answers, the member starts, once.

The daemon's agent, its SQLite journal and its executor are the real ones, against the real
engine through a socket served by a process of the test's own (``tests/support/engine_proxy.py``),
which the test kills with every connection it forwarded: the shared engine is never stopped."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.node.executor import NodeExecutor
from adapters.node.journal import SqliteJournal
from application.node_agent import NodeAgent
from domain.catalog import RuntimePin
from domain.node_messages import Vote
from domain.node_protocol import Command, CommandKind, MemberReport, Phase
from tests.fixtures.docker import containers_of, remove_labelled
from tests.integration.test_node_executor import INST, order
from tests.support.engine_proxy import EngineProxy, served

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(docker_host: str, tmp_path: Path) -> Iterator[EngineProxy]:
    yield from served(docker_host, tmp_path / "engine.sock")


async def test_an_engine_cut_between_vote_and_commit_leaves_the_member_starting_until_it_starts(
    proxy: EngineProxy,
    docker_host: str,
    busybox_pin: RuntimePin,
    docker_job_id: str,
    tmp_path: Path,
) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}"
    sent: list[Any] = []

    async def send(body: Any) -> None:
        sent.append(body)

    executor = NodeExecutor(node, f"unix://{proxy.path}")
    journal = SqliteJournal(tmp_path / "journal.db", node_name=node)
    agent = NodeAgent(node, journal, executor, send)
    o = order(docker_job_id, busybox_pin.digest, ("sleep", "600"), node=node)
    try:
        await agent.welcomed(1, INST)
        await agent.on_prepare(o)
        await asyncio.gather(*agent.in_flight())
        assert [v.yes for v in sent if isinstance(v, Vote)] == [True]

        proxy.stop()  # the engine stops answering between the vote and the commit
        commit = Command(CommandKind.COMMIT, o.ref)
        await agent.on_command(commit)
        await agent.on_command(commit)  # said again while it is still cut
        assert journal.get(o.ref.member_id).phase is Phase.STARTING  # type: ignore[union-attr]
        (info,) = await containers_of(docker_host, docker_job_id)
        assert info["State"]["Status"] == "created"
        reported = [b.phase for b in sent if isinstance(b, MemberReport)]
        assert set(reported) == {Phase.STARTING}  # never failed, exited or missing

        proxy.start()
        await agent.on_command(commit)  # the control plane says it again: now it starts
        (info,) = await containers_of(docker_host, docker_job_id)
        assert info["State"]["Status"] == "running"
        started_at = info["State"]["StartedAt"]
        await agent.on_command(commit)  # said once more before the report got through
        await agent.watch_once()
        assert journal.get(o.ref.member_id).phase is Phase.RUNNING  # type: ignore[union-attr]
        (info,) = await containers_of(docker_host, docker_job_id)
        assert info["State"]["StartedAt"] == started_at  # started once
        reported = [b.phase for b in sent if isinstance(b, MemberReport)]
        assert reported[-1] is Phase.RUNNING and Phase.EXITED not in reported
    finally:
        await agent.close()
        await executor.close()
        journal.close()
        await remove_labelled(docker_host, docker_job_id)
