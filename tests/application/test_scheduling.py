"""Scheduling through the real use cases on in-memory adapters: reservations are whole, held
while any member may still run, released when every member is known stopped."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from adapters.memory import MemoryLeaderLease, MemoryLeases
from adapters.memory.backend import MemoryBackend
from application import jobs, reconcile, submissions
from application.context import Context
from application.explain import explain_job, pending_waits
from application.supervisor import Supervisor
from domain.admission import Reservation
from domain.errors import InvalidInput
from domain.fleet import Pool
from domain.lifecycle import JobState, MemberState
from domain.ports import LaunchRequest
from tests.support.context import ADMIN, ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit

A = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")


async def submit(ctx: Context, profile: str = "h200:16", command: str = "train") -> str:
    intent = an_intent(profiles=(profile,), params={"command": command})
    preview = await submissions.create_preview(ctx, ALICE, intent)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def details(ctx: Context, job_id: str) -> jobs.JobDetails:
    return await jobs.get_job(ctx, ALICE, job_id)


async def reservation(ctx: Context, job_id: str) -> Reservation | None:
    d = await details(ctx, job_id)
    if not d.attempts:
        return None
    async with ctx.uow() as uow:
        return await uow.reservations.get(d.attempts[-1].attempt.id)


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def ctx(tmp_path: Path, backend: MemoryBackend) -> Context:
    return memory_context(tmp_path, backend, pools=(A,))


async def ticks(sup: Supervisor, n: int) -> None:
    """``n`` ticks, letting the stop requests they start run in between."""
    for _ in range(n):
        await sup.tick()
        await asyncio.sleep(0)


def handles(d: jobs.JobDetails) -> list[str]:
    return [m.handle or "" for m in d.attempts[-1].members]


async def test_a_gang_is_reserved_whole_and_released_when_every_member_stopped(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    d = await details(ctx, job_id)
    assert d.job.state is JobState.RUNNING
    members = d.attempts[0].members
    assert [(m.index, m.node, m.state) for m in members] == [
        (0, "a-0", MemberState.RUNNING),
        (1, "a-1", MemberState.RUNNING),
    ]
    held = await reservation(ctx, job_id)
    assert held is not None and held.gpus == 16
    assert [backend.members[h].request.assignment for h in handles(d)] == list(held.assignments)

    backend.finish(handles(d)[0], 0)
    await sup.tick()
    assert await reservation(ctx, job_id) is not None  # member 1 still runs
    backend.finish(handles(d)[1], 0)
    await sup.tick()
    assert (await details(ctx, job_id)).job.state is JobState.SUCCEEDED
    assert await reservation(ctx, job_id) is None


async def test_a_second_gang_that_does_not_fit_waits_holding_nothing(ctx: Context) -> None:
    first, second = await submit(ctx), await submit(ctx)
    await Supervisor(ctx).tick()
    assert (await details(ctx, first)).job.state is JobState.RUNNING
    d = await details(ctx, second)
    assert d.job.state is JobState.PENDING and d.attempts == []
    why = await explain_job(ctx, ALICE, second)
    assert (why.kind, why.position, why.pending_total) == ("capacity", 1, 1)
    assert why.text == (
        "needs 2×8 h200 GPUs in pool a; 1 of 3 nodes in pool a has room for a member now"
    )
    # `tp job ls` (GET /v1/jobs?why=true): the same words for every pending job of a page,
    # from one admission pass; a running job is left out
    assert await pending_waits(ctx, {first, second}) == {second: why.text}
    running = await explain_job(ctx, ALICE, first)
    assert running.text == (
        "holds a reservation of 16 GPUs for 2 members on a-0, a-1 (queue default)"
    )


async def test_a_failed_member_stops_its_gang_then_the_reservation_is_released(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    h = handles(await details(ctx, job_id))
    backend.finish(h[0], 3)
    await ticks(sup, 4)  # member 0 failed; member 1 asked to stop, exits, is recorded
    d = await details(ctx, job_id)
    assert d.job.state is JobState.FAILED and d.job.exit_code == 3
    assert d.attempts[0].members[1].reason == "stopped: member 0 failed"
    assert await reservation(ctx, job_id) is None


async def test_a_refused_launch_stops_the_members_already_started(
    tmp_path: Path,
) -> None:
    def refuse_member_1(request: LaunchRequest) -> None:
        if request.member_index == 1:
            raise InvalidInput("no such image on this node", fix="build it")

    backend = MemoryBackend(behaviour=refuse_member_1)
    ctx = memory_context(tmp_path, backend, pools=(A,))
    job_id = await submit(ctx)
    await Supervisor(ctx).tick()
    d = await details(ctx, job_id)
    assert d.job.state is JobState.FAILED
    assert d.job.reason == "member 1 could not launch: no such image on this node (build it)"
    assert backend.stops == 1 and backend.members == {}  # member 0 stopped and released
    assert await reservation(ctx, job_id) is None


async def test_an_out_of_contact_member_keeps_the_reservation_until_its_node_is_declared_lost(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    backend.lost_nodes.add("a-1")
    for _ in range(3):
        await sup.tick()
    d = await details(ctx, job_id)
    assert [m.state for m in d.attempts[0].members] == [MemberState.RUNNING, MemberState.UNKNOWN]
    assert d.job.state is JobState.RUNNING
    assert await reservation(ctx, job_id) is not None
    why = await explain_job(ctx, ALICE, job_id)
    assert "member 1 is out of contact" in why.text

    assert await reconcile.declare_node_lost(ctx, ADMIN, "a-1", "host burned down") == 1
    await ticks(sup, 4)  # member 1 failed: the rest of the gang is stopped
    d = await details(ctx, job_id)
    assert d.job.state is JobState.FAILED
    assert d.attempts[0].members[1].reason == ("node a-1 declared lost by admin: host burned down")
    assert await reservation(ctx, job_id) is None
    why = await explain_job(ctx, ALICE, job_id)  # why it ended, not "is failed"
    assert why.kind == "finished"
    assert why.text.startswith(f"it failed: {d.job.reason}"), why.text
    assert why.text.endswith(f"; its output: `tp job logs {job_id}`")
    async with ctx.uow() as uow:
        node = await uow.fleet.node("a-1")
    assert node is not None and node.why_not == "lost"


async def test_an_operator_can_release_a_reservation_explicitly(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx, "h200:8")
    sup = Supervisor(ctx)
    await sup.tick()
    backend.lost_nodes.add("a-0")
    await sup.tick()
    attempt_id = (await details(ctx, job_id)).attempts[0].attempt.id
    with pytest.raises(InvalidInput, match="reason"):
        await reconcile.release_reservation(ctx, ADMIN, attempt_id, " ")
    assert await reconcile.release_reservation(ctx, ADMIN, attempt_id, "checked by hand")
    assert not await reconcile.release_reservation(ctx, ADMIN, attempt_id, "again")
    d = await details(ctx, job_id)
    assert d.job.state is JobState.FAILED
    assert await reservation(ctx, job_id) is None


async def test_only_the_leader_ticks_and_another_takes_over_when_it_dies(ctx: Context) -> None:
    leases = MemoryLeases()
    first = MemoryLeaderLease(leases)
    one, two = Supervisor(ctx, first), Supervisor(ctx, MemoryLeaderLease(leases))
    job_id = await submit(ctx, "h200:8")
    assert await two.tick() is True  # first come
    assert await one.tick() is False
    assert (await details(ctx, job_id)).job.state is JobState.RUNNING
    await two.close_lease()
    assert await one.tick() is True
    first.crash()
    assert await two.tick() is True


async def test_cancelling_a_running_gang_releases_once_every_member_stopped(
    ctx: Context,
) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    await jobs.cancel_job(ctx, ALICE, job_id)
    await ticks(sup, 3)
    assert (await details(ctx, job_id)).job.state is JobState.CANCELLED
    assert await reservation(ctx, job_id) is None


async def test_preview_refuses_a_request_that_can_never_start(ctx: Context) -> None:
    with pytest.raises(InvalidInput) as e:
        await submit(ctx, "h200:32")
    assert e.value.message == (
        "this request can never start: role main needs 4×8 h200 GPUs in pool a; pool a has "
        "only 3 nodes"
    )
    assert e.value.field == "intent.profiles[0]"
