"""Checkpoints on the node backend (docs/checkpoints.md): the daemon's side
(application/node_checkpoint_carrier.py over real directories) talking to the gateway's rules
(application/node_checkpoints.py over the in-memory units and the filesystem blob store)
through the in-process courier. A node keeps the newest complete checkpoints of the members it
holds, once, sending only the files the store lacks; it can keep and read nothing through a
member it does not hold; the next attempt's node places the newest one after checking every
file, and a checkpoint whose blob was damaged is forgotten so the one before it is used."""

from __future__ import annotations

import asyncio
import errno
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from adapters.checkpoint_dirs import FilesystemCheckpoints
from adapters.memory.journal import MemoryJournal
from adapters.sim.node_runtime import SimRuntime
from application.context import Context
from application.node_agent import NodeAgent
from application.node_checkpoint_carrier import CheckpointCarrier
from application.node_checkpoints import with_resume
from domain.artifacts import Manifest
from domain.errors import Forbidden, InvalidInput
from domain.node_messages import CheckpointOffer, PrepareOrder, Vote
from domain.node_protocol import MemberRef
from tests.application.test_checkpoints import write
from tests.application.test_node_agent import INSTALLATION, order
from tests.contract.test_node_launches import Gang, new_gang, ref
from tests.contract.test_node_ports import setup_fleet
from tests.support.checkpoint_courier import DirectCourier
from tests.support.checkpoint_tricks import SwappedAfterListing
from tests.support.context import memory_context

pytestmark = pytest.mark.unit


@pytest.fixture
async def ctx(tmp_path: Path) -> Context:
    ctx = memory_context(tmp_path)
    await setup_fleet(ctx.uow)
    return ctx


def carrier(ctx: Context, tmp_path: Path, node: str) -> CheckpointCarrier:
    return CheckpointCarrier(FilesystemCheckpoints(tmp_path / node), DirectCourier(ctx, node))


def courier(c: CheckpointCarrier) -> DirectCourier:
    assert isinstance(c.courier, DirectCourier)
    return c.courier


async def recorded(ctx: Context, job_id: str) -> list[tuple[int, str, int | None]]:
    async with ctx.uow() as uow:
        return [(c.attempt, c.name, c.step) for c in await uow.checkpoints.for_job(job_id)]


def order_of(g: Gang, index: int, node: str) -> PrepareOrder:
    return order(
        g.members[index].id, index, ref=ref(g, index), node=node, job_id=g.job.id,
        attempt=g.attempt.number,
    )  # fmt: skip


async def kept_then_again(
    ctx: Context, tmp_path: Path, *saves: dict[str, bytes]
) -> tuple[Gang, Gang]:
    """Attempt 1 of a job on n-0 and n-1, whose n-0 keeps each of ``saves`` in turn (the i-th
    as checkpoint-i), then its attempt 2 placed on n-1 and n-2."""
    g = await new_gang(ctx.uow)
    n0 = carrier(ctx, tmp_path, "n-0")
    work, _ = await n0.storage.prepare(g.job.id, 1)
    for i, files in enumerate(saves, 1):
        write(work, f"checkpoint-{i}", files, str(i))
        await n0.upload(ref(g, 0), g.job.id, 1)
    return g, await new_gang(ctx.uow, ("n-1", "n-2"), 29501, job=g.job, number=2)


async def test_a_node_keeps_the_newest_complete_checkpoints_once_sending_what_the_store_lacks(
    ctx: Context, tmp_path: Path
) -> None:
    g = await new_gang(ctx.uow)
    n0 = carrier(ctx, tmp_path, "n-0")
    work, _ = await n0.storage.prepare(g.job.id, 1)
    write(work, "checkpoint-100", {"w.bin": b"a"}, "100")
    write(work, "checkpoint-200", {"w.bin": b"b", "tok.json": b"{}"}, "200")
    write(work, "checkpoint-300", {"w.bin": b"c", "tok.json": b"{}"}, "300")
    write(work, "checkpoint-400", {"w.bin": b"d"}, marker=None)  # cut short: never offered

    assert await n0.upload(ref(g, 0), g.job.id, 1) == 2  # the newest two: 100 would go at once
    assert await recorded(ctx, g.job.id) == [(1, "checkpoint-200", 200), (1, "checkpoint-300", 300)]
    assert len(courier(n0).sent) == 5  # w.bin ×2, tok.json once, COMPLETE ×2
    assert await n0.upload(ref(g, 0), g.job.id, 1) == 0  # nothing new: nothing hashed or sent

    restarted = carrier(ctx, tmp_path, "n-0")  # the daemon again: offers, sends nothing
    await restarted.upload(ref(g, 0), g.job.id, 1)
    assert courier(restarted).sent == []
    write(work, "checkpoint-500", {"w.bin": b"c", "tok.json": b"{}"}, "500")  # same weights
    await restarted.upload(ref(g, 0), g.job.id, 1)
    assert len(courier(restarted).sent) == 1  # its COMPLETE only
    assert [n for _, n, _ in await recorded(ctx, g.job.id)] == ["checkpoint-300", "checkpoint-500"]


async def test_a_node_keeps_and_reads_nothing_through_a_member_it_does_not_hold(
    ctx: Context, tmp_path: Path
) -> None:
    g = await new_gang(ctx.uow)
    offered = CheckpointOffer(ref(g, 0), g.job.id, "checkpoint-1", 1, Manifest(()))
    stranger = DirectCourier(ctx, "n-1")  # member 0 is placed on n-0
    for node, o, why in (
        ("n-1", offered, "is unknown"),  # not among the members n-1 holds
        ("n-0", replace(offered, job_id="job-other"), "belongs to job"),
        ("n-0", replace(offered, ref=ref(g, 0, epoch=2)), "stale epoch"),
    ):
        with pytest.raises(Forbidden, match=why):
            await DirectCourier(ctx, node).offer(o)
    with pytest.raises(Forbidden):
        await stranger.get_file(ref(g, 0), g.job.id, "0" * 64, str(tmp_path / "x"))
    n0 = carrier(ctx, tmp_path, "n-0")
    work, _ = await n0.storage.prepare(g.job.id, 1)
    write(work, "checkpoint-1", {"w.bin": b"real"}, "1")
    with pytest.raises(InvalidInput, match="digest"):  # content that is not what it claims
        content = n0.storage.read(f"{work}/checkpoint-1/w.bin", f"{work}/checkpoint-1")
        await courier(n0).put_file(ref(g, 0), g.job.id, "0" * 64, content)
    assert await ctx.blob_store().size("sha256:" + "0" * 64) is None
    assert await recorded(ctx, g.job.id) == []


async def test_the_next_attempt_places_the_newest_and_a_damaged_one_is_forgotten(
    ctx: Context, tmp_path: Path
) -> None:
    g, again = await kept_then_again(
        ctx, tmp_path, {"w.bin": b"older"}, {"w.bin": b"newer", "sub/opt.bin": b"o"}
    )

    first = await with_resume(ctx, order_of(again, 0, "n-1"))
    assert first.resume is not None and (first.resume.name, first.resume.step) == (
        "checkpoint-2",
        2,
    )
    n1 = carrier(ctx, tmp_path, "n-1")
    assert await n1.fetch(first) is None
    placed = Path((await n1.storage.prepare(g.job.id, 2))[1]) / "checkpoint-2"
    assert (placed / "w.bin").read_bytes() == b"newer" and (placed / "sub/opt.bin").exists()
    assert await n1.fetch(first) is None and len(courier(n1).fetched) == 3  # placed once

    digest = next(f.sha256 for f in first.resume.manifest.files if f.path == "w.bin")
    blob = tmp_path / "blobs" / "sha256" / digest[:2] / digest
    blob.chmod(0o644)
    blob.write_bytes(b"rot")  # the store's copy damaged after it was kept
    second = await with_resume(ctx, order_of(again, 1, "n-2"))
    n2 = carrier(ctx, tmp_path, "n-2")
    why = await n2.fetch(second)
    assert why is not None and "checkpoint-2 of attempt 1 cannot be placed: w.bin" in why, why
    assert [n for _, n, _ in await recorded(ctx, g.job.id)] == ["checkpoint-1"]  # forgotten
    resume_root = Path((await n2.storage.prepare(g.job.id, 2))[1])
    assert not any(resume_root.iterdir())  # noqa: ASYNC240 - nothing left half placed
    retried = await with_resume(ctx, order_of(again, 1, "n-2"))
    assert retried.resume is not None and retried.resume.name == "checkpoint-1"
    assert await n2.fetch(retried) is None


async def test_a_checkpoint_that_cannot_be_placed_is_a_busy_no_that_is_not_journalled(
    ctx: Context, tmp_path: Path
) -> None:
    g, again = await kept_then_again(ctx, tmp_path, {"w.bin": b"w"})
    prepared = await with_resume(ctx, order_of(again, 0, "n-1"))
    async with ctx.uow() as uow:  # forgotten meanwhile (say, collected by an operator)
        await uow.checkpoints.drop(g.job.id, 1, "checkpoint-1")
        await uow.commit()
    sent: list[object] = []

    async def send(body: object) -> None:
        sent.append(body)

    journal = MemoryJournal({"installation": INSTALLATION})
    agent = NodeAgent(
        "n-1", journal, SimRuntime("n-1"), send, checkpoints=carrier(ctx, tmp_path, "n-1")
    )
    agent.recovered = True
    await agent.on_prepare(prepared)
    await asyncio.gather(*agent.in_flight())
    votes = [b for b in sent if isinstance(b, Vote)]
    assert len(votes) == 1 and not votes[0].yes and votes[0].busy, votes
    assert "checkpoint-1 of attempt 1 cannot be placed" in votes[0].reason
    assert journal.get(prepared.ref.member_id) is None  # a repeated Prepare asks again


class FullDisk(DirectCourier):
    """The node's disk fills up while the second file is written."""

    async def get_file(
        self, ref: MemberRef, job_id: str, sha256: str, path: str
    ) -> tuple[str, int]:
        if self.fetched:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return await super().get_file(ref, job_id, sha256, path)


async def test_a_full_disk_leaves_nothing_placed_and_says_why(ctx: Context, tmp_path: Path) -> None:
    g, again = await kept_then_again(ctx, tmp_path, {"a.bin": b"a", "b.bin": b"b"})
    prepared = await with_resume(ctx, order_of(again, 0, "n-1"))
    n1 = CheckpointCarrier(FilesystemCheckpoints(tmp_path / "n-1"), FullDisk(ctx, "n-1"))
    why = await n1.fetch(prepared)
    assert why is not None and "cannot be written on this node" in why, why
    assert "No space left on device" in why
    resume_root = Path((await n1.storage.prepare(g.job.id, 2))[1])
    assert not any(resume_root.iterdir())  # noqa: ASYNC240 - nothing left half placed
    assert [n for _, n, _ in await recorded(ctx, g.job.id)] == ["checkpoint-1"]  # not its fault


async def test_a_directory_swapped_for_a_link_after_the_listing_reads_nothing_of_the_host(
    ctx: Context, tmp_path: Path
) -> None:
    host = tmp_path / "host-secrets"  # say, the daemon's state directory
    host.mkdir()
    (host / "credential").write_bytes(b"node credential")
    (host / "COMPLETE").write_bytes(b"1")
    g = await new_gang(ctx.uow)
    n0 = CheckpointCarrier(SwappedAfterListing(tmp_path / "n-0", host), DirectCourier(ctx, "n-0"))
    work, _ = await n0.storage.prepare(g.job.id, 1)
    write(work, "checkpoint-1", {"credential": b"the workload's"}, "1")
    assert await n0.upload(ref(g, 0), g.job.id, 1) == 0
    assert await recorded(ctx, g.job.id) == [] and courier(n0).sent == []
    stored = {b.digest async for b in ctx.blob_store().listing()}
    assert "sha256:" + hashlib.sha256(b"node credential").hexdigest() not in stored
