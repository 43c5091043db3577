"""The node daemon's agent over its real journal (SQLite) and the real engine (issue 18):

* defect 1 — a running member whose journal row is corrupted on disk is re-adopted from its
  container's labels when the daemon restarts, followed, and its real exit code and final log
  are reported when it ends;
* defect 4 — two installations (control planes) whose daemons are both named ``n1`` share one
  engine: each re-adopts, lists and removes only its own installation's containers, and
  neither touches a container made before installation ids (no label);
* a restored backup of n1's state directory started on the same engine while n1's own daemon
  holds the session: until the gateway accepts it (it never does), it changes nothing — not
  n1's prepared, never-started container, not its own journal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiodocker
import pytest
import pytest_asyncio

from adapters.node.executor import NodeExecutor
from adapters.node.journal import SqliteJournal
from application.node_adoption import survey
from application.node_agent import NodeAgent
from domain.catalog import RuntimePin
from domain.node_messages import LogChunk, PrepareOrder
from domain.node_protocol import Command, CommandKind, MemberRef, MemberReport, NodeCapacity, Phase
from tests.fixtures.docker import containers_of, remove_labelled

pytestmark = pytest.mark.integration

CAP = NodeCapacity(0, None, 1.0, 512)


@dataclass
class Daemon:
    """One ``tp node run`` of node n1: its journal file, its engine client, its agent."""

    path: Path
    installation: str
    host: str
    shared: Path | None = None
    sent: list[Any] = field(default_factory=list)
    journal: SqliteJournal | None = None
    runtime: NodeExecutor | None = None
    agent: NodeAgent | None = None

    async def start(self, welcomed: bool = True) -> NodeAgent:
        """(Re)start: open the journal and the engine, recover, as the daemon does once the
        gateway welcomed it (``welcomed``; else it has only started: it changed nothing yet)."""
        await self.stop()
        self.journal = SqliteJournal(self.path, node_name="n1")
        if self.journal.meta("installation") != self.installation:
            self.journal.set_meta("installation", self.installation)
        self.runtime = NodeExecutor("n1", self.host, network_mode="host", shared_dir=self.shared)

        async def send(body: Any) -> None:
            self.sent.append(body)

        self.agent = NodeAgent("n1", self.journal, self.runtime, send)
        if welcomed:
            assert await self.agent.recover()
        return self.agent

    async def stop(self) -> None:
        if self.agent is not None:
            await self.agent.close()
        if self.runtime is not None:
            await self.runtime.close()
        if self.journal is not None:
            self.journal.close()
        self.agent = self.runtime = self.journal = None


@pytest_asyncio.fixture
async def daemons(docker_host: str, docker_job_id: str) -> AsyncIterator[list[Daemon]]:
    made: list[Daemon] = []
    yield made
    for d in made:
        await d.stop()
    await remove_labelled(docker_host, docker_job_id)


def order(job_id: str, image: str, command: tuple[str, ...], member: str) -> PrepareOrder:
    return PrepareOrder(
        ref=MemberRef(f"att-{job_id[4:]}", member, 0, 1),
        node="n1",
        job_id=job_id,
        image=image,
        command=command,
        env={},
        cpus=0.5,
        memory_mb=64,
        gpu_indices=(),
        source_digest=None,
        members=1,
        process_model="single-process",
        check_port=0,
    )


async def launched(agent: NodeAgent, o: PrepareOrder) -> str:
    """Prepared and committed: the container id of the started member."""
    await agent.on_prepare(o)
    await asyncio.gather(*agent._tasks.values())
    await agent.on_command(Command(CommandKind.COMMIT, o.ref))
    entry = await agent.entry(o.ref.member_id)
    assert entry is not None and entry.container_id is not None, entry
    return entry.container_id


async def until_phase(agent: NodeAgent, member: str, phase: Phase, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while True:
        await agent.watch_once()
        entry = await agent.entry(member)
        if entry is not None and entry.phase is phase:
            return
        assert time.monotonic() < deadline, f"{member} is {entry}, not {phase}"
        await asyncio.sleep(0.2)


async def test_a_running_member_whose_journal_row_is_corrupted_is_readopted(
    daemons: list[Daemon], docker_host: str, busybox_pin: RuntimePin, docker_job_id: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    d = Daemon(tmp_path / "journal.sqlite", "inst-a", docker_host, shared)
    daemons.append(d)
    agent = await d.start()
    member = f"mem-{uuid.uuid4().hex[:8]}"
    wait = "while [ ! -e /shared/go ]; do sleep 0.1; done; echo last words; exit 3"
    o = order(docker_job_id, busybox_pin.digest, ("sh", "-c", wait), member)
    cid = await launched(agent, o)
    await until_phase(agent, member, Phase.RUNNING)
    await d.stop()  # the daemon dies; a bit flips in its journal row on disk
    raw = sqlite3.connect(d.path)
    raw.execute("UPDATE members SET reason = 'bit flip' WHERE member_id = ?", (member,))
    raw.commit()
    raw.close()

    agent = await d.start()
    assert d.journal is not None and [c.member_id for c in d.journal.corrupt] == [member]
    entry = await agent.entry(member)
    assert entry is not None and (entry.phase, entry.container_id) == (Phase.RUNNING, cid)
    assert entry.order.ref == MemberRef(f"att-{docker_job_id[4:]}", member, 0, 1)
    assert entry.order.job_id == docker_job_id and entry.order.installation == "inst-a"
    hello = await agent.hello(CAP, "127.0.0.1", "test")
    assert [(r.ref.member_id, r.phase) for r in hello.journal] == [(member, Phase.RUNNING)]
    assert hello.scan is not None and hello.scan.complete and hello.scan.unadopted == ()
    assert hello.scan.engine == await agent.runtime.engine_id()
    [info] = await containers_of(docker_host, docker_job_id)
    assert info["State"]["Running"]  # never stopped or restarted

    d.sent.clear()
    (shared / "go").touch()  # the member ends by itself: its exit code and log are reported
    await until_phase(agent, member, Phase.EXITED)
    final = b"".join(b.data for b in d.sent if isinstance(b, LogChunk) and not b.live)
    assert final == b"last words\n"
    [report] = [b for b in d.sent if isinstance(b, MemberReport)]
    assert (report.phase, report.exit_code) == (Phase.EXITED, 3)


async def _legacy(docker_host: str, image: str, job_id: str, member: str) -> str:
    """A container made by a daemon of n1 before installation ids: no installation label."""
    labels = {
        "tuneplane.job": job_id,
        "tuneplane.attempt": f"att-{job_id[4:]}",
        "tuneplane.member": member,
        "tuneplane.member-index": "0",
        "tuneplane.node": "n1",
        "tuneplane.epoch": "1",
    }
    async with aiodocker.Docker(url=docker_host) as docker:
        c = await docker.containers.create(
            {"Image": image, "Cmd": ["sleep", "600"], "Labels": labels}, name=f"tp-{member}"
        )
        await c.start()
        return str(c.id)


async def test_two_installations_on_one_engine_adopt_list_and_reap_only_their_own(
    daemons: list[Daemon], docker_host: str, busybox_pin: RuntimePin, docker_job_id: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    a = Daemon(tmp_path / "a" / "journal.sqlite", "inst-a", docker_host)
    b = Daemon(tmp_path / "b" / "journal.sqlite", "inst-b", docker_host)
    daemons += [a, b]
    members = {"a": f"mem-a-{uuid.uuid4().hex[:8]}", "b": f"mem-b-{uuid.uuid4().hex[:8]}"}
    cids = {}
    for name, d in (("a", a), ("b", b)):
        agent = await d.start()
        o = order(docker_job_id, busybox_pin.digest, ("sleep", "600"), members[name])
        cids[name] = await launched(agent, o)
    legacy = f"mem-old-{uuid.uuid4().hex[:8]}"
    cids["old"] = await _legacy(docker_host, busybox_pin.digest, docker_job_id, legacy)
    owners = {
        str(c["Id"]): c["Config"]["Labels"].get("tuneplane.installation")
        for c in await containers_of(docker_host, docker_job_id)
    }
    assert owners == {cids["a"]: "inst-a", cids["b"]: "inst-b", cids["old"]: None}
    for name, d in (("a", a), ("b", b)):
        assert d.runtime is not None
        assert await d.runtime.held(d.installation) == {members[name]: cids[name]}

    for d in (a, b):  # both journals are lost: each daemon restarts on an empty one
        await d.stop()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{d.path}{suffix}")
    for name, d in (("a", a), ("b", b)):
        agent = await d.start()
        hello = await agent.hello(CAP, "127.0.0.1", "test")
        assert [(r.ref.member_id, r.phase) for r in hello.journal] == [
            (members[name], Phase.RUNNING)
        ]  # its own re-adopted; the other installation's and the legacy one not even listed
        assert hello.scan is not None and hello.scan.complete and hello.scan.unadopted == ()
        assert agent.orphans == {}

    assert a.agent is not None
    for other in (members["b"], legacy):  # told to forget members it does not own: no effect
        await a.agent.on_command(Command(CommandKind.FORGET, MemberRef("att-x", other, 0, 1)))
    running = {
        str(c["Id"]): c["State"]["Running"] for c in await containers_of(docker_host, docker_job_id)
    }
    assert running == dict.fromkeys(cids.values(), True)
    ref_a = MemberRef(f"att-{docker_job_id[4:]}", members["a"], 0, 1)
    await a.agent.on_command(Command(CommandKind.FORGET, ref_a, "recorded final"))
    left = {str(c["Id"]) for c in await containers_of(docker_host, docker_job_id)}
    assert left == {cids["b"], cids["old"]}  # its own, and only its own, removed


def dumped(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return "\n".join(db.iterdump())
    finally:
        db.close()


async def test_a_restored_backup_changes_nothing_before_its_welcome(
    daemons: list[Daemon], docker_host: str, busybox_pin: RuntimePin, docker_job_id: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    (tmp_path / "n1").mkdir()
    own = Daemon(tmp_path / "n1" / "journal.sqlite", "inst-a", docker_host)
    daemons.append(own)
    agent = await own.start()
    (tmp_path / "backup").mkdir()  # the backup, taken before the job
    source, copied = sqlite3.connect(own.path), sqlite3.connect(tmp_path / "backup" / "j.sqlite")
    source.backup(copied)
    source.close()
    copied.close()
    member = f"mem-{uuid.uuid4().hex[:8]}"
    o = order(docker_job_id, busybox_pin.digest, ("sleep", "600"), member)
    await agent.on_prepare(o)
    await asyncio.gather(*agent._tasks.values())
    entry = await agent.entry(member)
    assert entry is not None and entry.phase is Phase.PREPARED and entry.container_id
    before = dumped(tmp_path / "backup" / "j.sqlite")

    copy = Daemon(tmp_path / "backup" / "j.sqlite", "inst-a", docker_host)
    daemons.append(copy)
    restored = await copy.start(welcomed=False)  # started: it looks, before connecting
    assert not (await survey(restored)).complete
    hello = await restored.hello(CAP, "127.0.0.1", "test")  # the gateway refuses it
    await restored.watch_once()
    await copy.stop()
    assert hello.journal == () and hello.scan is not None and not hello.scan.complete
    assert member in hello.scan.reason  # its silence about the member proves nothing
    [info] = await containers_of(docker_host, docker_job_id)
    assert (info["Id"], info["State"]["Status"]) == (entry.container_id, "created")
    assert dumped(tmp_path / "backup" / "j.sqlite") == before

    await agent.on_command(Command(CommandKind.COMMIT, o.ref))  # n1's own daemon goes on
    await until_phase(agent, member, Phase.RUNNING)
