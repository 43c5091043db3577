"""Downloading an output file a node keeps (application/node_output_fetch.py,
docs/capsule.md#on-the-node-backend): the control plane asks through the ledger, the gateway
carries the request (``due_scans``), the daemon's agent sends the file over real directories
(adapters/outputs.py) through the in-process courier, and the gateway's rules store it in the
filesystem blob store only when it is what the manifest recorded. The gRPC call itself runs
over TLS against real daemons in tests/e2e/test_node_artifacts.py."""

from __future__ import annotations

import asyncio
import errno
import hashlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from adapters.memory.journal import MemoryJournal
from adapters.outputs import FilesystemOutputs
from adapters.sim.node_runtime import SimRuntime
from application import node_output_fetch
from application.context import Context
from application.node_agent import NodeAgent
from application.node_output_fetch import fetch_from_node
from application.node_outputs import due_scans
from domain.artifacts import ArtifactFile, ArtifactRecord, ScanRequest
from domain.errors import Conflict, Forbidden, InvalidInput, Unavailable
from domain.fleet import Connectivity
from domain.node_messages import FetchOutput, ScanOutputs
from tests.application.test_node_agent import INSTALLATION
from tests.contract.test_node_ports import setup_fleet
from tests.support.checkpoint_courier import DirectCourier
from tests.support.context import memory_context

pytestmark = pytest.mark.unit

JOB, ATTEMPT = "job-1", "att-1"


@pytest.fixture
async def ctx(tmp_path: Path) -> Context:
    ctx = memory_context(tmp_path)
    await setup_fleet(ctx.uow)
    return ctx


class Node:
    """Node ``name``'s daemon side: its outputs root and an agent answering through a courier."""

    def __init__(self, ctx: Context, tmp_path: Path, name: str, courier: DirectCourier) -> None:
        self.ctx, self.name, self.courier = ctx, name, courier
        self.outputs = FilesystemOutputs(tmp_path / name / "outputs")
        self.agent = NodeAgent(
            name, MemoryJournal({"installation": INSTALLATION}), SimRuntime(name), self._send,
            outputs=self.outputs, courier=courier,
        )  # fmt: skip
        self.sent: dict[str, datetime] = {}

    async def _send(self, body: object) -> None:
        pass

    async def kept(self, files: dict[str, bytes], member: int = 0) -> ArtifactRecord:
        """The member's files written and recorded as its manifest (its exit 0)."""
        root = Path(await self.outputs.prepare(JOB, ATTEMPT, member))
        for path, data in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        manifest = await self.outputs.scan(JOB, ATTEMPT, member)
        assert manifest is not None
        at = self.ctx.clock.now()
        return ArtifactRecord(f"mem-{member}", JOB, ATTEMPT, 1, member, manifest, at, self.name)

    def path(self, path: str, member: int = 0) -> Path:
        return self.outputs.root / JOB / ATTEMPT / str(member) / path

    async def pump(self) -> None:
        """The gateway holding this node's stream: deliver each due request, as it would."""
        while True:
            for _, message in await due_scans(self.ctx, [self.name], self.sent):
                self.agent.start_scan(message)
            await asyncio.sleep(0.01)


async def fetched(
    ctx: Context, node: Node, record: ArtifactRecord, path: str, wait: float = 10.0
) -> bytes:
    pump = asyncio.create_task(node.pump())
    try:
        file = next(f for f in record.manifest.files if f.path == path)
        digest = await fetch_from_node(ctx, record, file, wait)
        await asyncio.gather(*node.agent._scans.values())
    finally:
        pump.cancel()
    return await ctx.blob_store().read(digest)


def file_of(record: ArtifactRecord, path: str) -> ArtifactFile:
    return next(f for f in record.manifest.files if f.path == path)


async def test_a_file_is_sent_once_into_the_blob_store_and_served_from_it_after(
    ctx: Context, tmp_path: Path
) -> None:
    courier = DirectCourier(ctx, "n-0")
    n0 = Node(ctx, tmp_path, "n-0", courier)
    weights = bytes(range(256)) * 5000  # more than one piece
    record = await n0.kept({"model/weights.bin": weights, "empty.txt": b""})
    assert await fetched(ctx, n0, record, "model/weights.bin") == weights
    assert await fetched(ctx, n0, record, "empty.txt") == b""
    n0.path("model/weights.bin").unlink()  # gone from the node: the stored copy still serves
    got = await fetch_from_node(ctx, record, file_of(record, "model/weights.bin"), wait=0.5)
    assert await ctx.blob_store().read(got) == weights


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda p: p.write_bytes(b"X" * 4), "is not the one recorded"),  # same size
        (lambda p: p.write_bytes(b"grown!"), "6 bytes now, 4 when its member completed"),
        (lambda p: p.unlink(), "cannot be read on node n-0"),
    ],
)
async def test_a_file_changed_or_gone_on_the_node_is_refused_and_nothing_is_stored(
    ctx: Context, tmp_path: Path, change: object, said: str
) -> None:
    n0 = Node(ctx, tmp_path, "n-0", DirectCourier(ctx, "n-0"))
    record = await n0.kept({"ckpt.pt": b"good"})
    change(n0.path("ckpt.pt"))  # type: ignore[operator]
    with pytest.raises(Conflict) as refused:
        await fetched(ctx, n0, record, "ckpt.pt")
    assert said in refused.value.message and "node n-0" in refused.value.message
    assert "tp artifacts verify job-1" in refused.value.fix
    digest = f"sha256:{hashlib.sha256(b'good').hexdigest()}"
    assert await ctx.blob_store().size(digest) is None


async def test_a_link_on_the_way_reads_nothing_of_the_host(ctx: Context, tmp_path: Path) -> None:
    n0 = Node(ctx, tmp_path, "n-0", DirectCourier(ctx, "n-0"))
    record = await n0.kept({"sub/a.txt": b"a"})
    secret = tmp_path / "host"
    secret.mkdir()
    (secret / "a.txt").write_bytes(b"a")  # same content, outside the member's directory
    n0.path("sub/a.txt").unlink()
    n0.path("sub").rmdir()
    n0.path("sub").symlink_to(secret)
    with pytest.raises(Conflict, match="symbolic link"):
        await fetched(ctx, n0, record, "sub/a.txt")


async def test_a_node_away_or_silent_is_unavailable_never_missing(
    ctx: Context, tmp_path: Path
) -> None:
    n0 = Node(ctx, tmp_path, "n-0", DirectCourier(ctx, "n-0"))
    record = await n0.kept({"ckpt.pt": b"good"})
    with pytest.raises(Unavailable, match=r"did not send ckpt\.pt"):  # nobody carries the request
        await fetch_from_node(ctx, record, file_of(record, "ckpt.pt"), wait=0.3)
    async with ctx.uow() as uow:
        node = await uow.fleet.node("n-0")
        assert node is not None
        await uow.fleet.put_node(replace(node, connectivity=Connectivity.DISCONNECTED))
        await uow.commit()
    with pytest.raises(Unavailable) as away:
        await fetch_from_node(ctx, record, file_of(record, "ckpt.pt"), wait=5)
    assert "node n-0 is disconnected" in away.value.message and "tp node ls" in away.value.fix
    gone = replace(record, node="n-9")
    with pytest.raises(Unavailable, match="node n-9 is gone from the fleet"):
        await fetch_from_node(ctx, gone, file_of(record, "ckpt.pt"), wait=5)


async def _content(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_only_the_node_asked_may_answer_and_only_once(ctx: Context, tmp_path: Path) -> None:
    file = ArtifactFile("ckpt.pt", 4, hashlib.sha256(b"good").hexdigest())
    now = ctx.clock.now()
    async with ctx.uow() as uow:
        await uow.output_scans.request(ScanRequest("f-1", "n-0", JOB, ATTEMPT, "m", 0, now, file))
        await uow.output_scans.request(ScanRequest("s-1", "n-0", JOB, ATTEMPT, "m", 0, now))
        await uow.commit()
    receive = node_output_fetch.receive
    with pytest.raises(Forbidden, match="node n-1 has no open request"):
        await receive(ctx, "n-1", "f-1", "", _content(b"good"))  # another node's request
    with pytest.raises(Forbidden):
        await receive(ctx, "n-0", "s-1", "", _content(b"good"))  # a scan, not a fetch
    with pytest.raises(InvalidInput, match="not the one recorded"):
        await receive(ctx, "n-0", "f-1", "", _content(b"evil"))
    async with ctx.uow() as uow:
        answer = await uow.output_scans.result("f-1")
    assert answer is not None and "not the one recorded" in answer.error
    with pytest.raises(Forbidden):  # answered: a second try (say, the right bytes) is refused
        await receive(ctx, "n-0", "f-1", "", _content(b"good"))
    assert await ctx.blob_store().size(f"sha256:{file.sha256}") is None


class Slow(DirectCourier):
    """Holds each file until released, counting the sends."""

    def __init__(self, ctx: Context, node: str) -> None:
        super().__init__(ctx, node)
        self.calls = 0
        self.release = asyncio.Event()

    async def put_output(
        self, request_id: str, content: AsyncIterator[bytes] | None, error: str = ""
    ) -> None:
        self.calls += 1
        await self.release.wait()
        await super().put_output(request_id, content, error)


async def test_a_request_sent_again_while_the_file_goes_is_sent_once(
    ctx: Context, tmp_path: Path
) -> None:
    courier = Slow(ctx, "n-0")
    n0 = Node(ctx, tmp_path, "n-0", courier)
    record = await n0.kept({"ckpt.pt": b"good"})
    fetch = asyncio.create_task(fetch_from_node(ctx, record, file_of(record, "ckpt.pt"), 10))
    due: list[ScanOutputs | FetchOutput] = []
    while not due:  # the request, once the fetch has written it
        await asyncio.sleep(0.01)
        due = [m for _, m in await due_scans(ctx, ["n-0"], {})]
    [message] = due
    for _ in range(3):  # the gateway resends an unanswered request (and a new stream does)
        n0.agent.start_scan(message)
        await asyncio.sleep(0)
    courier.release.set()
    digest = await fetch
    assert courier.calls == 1
    assert await ctx.blob_store().read(digest) == b"good"


async def test_a_full_blob_store_is_said_at_once_not_waited_out(
    ctx: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n0 = Node(ctx, tmp_path, "n-0", DirectCourier(ctx, "n-0"))
    record = await n0.kept({"ckpt.pt": b"good"})
    store = ctx.blob_store()

    async def full(*args: object, **kwargs: object) -> tuple[str, int]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(store), "put", full)
    with pytest.raises(Conflict, match="cannot store it now \\(No space left on device\\)"):
        await fetched(ctx, n0, record, "ckpt.pt", wait=30)
