"""Retries on the node backend, simulated (the real supervisor, scheduler, gang coordinator,
gateway and daemon use cases over in-memory adapters, on a fake clock): an attempt that ended
as its retry policy says starts another only after its backoff, with its whole envelope
reserved again, and never while a member of the previous one may still run; a user's stop
never retries; a policy runs out (docs/lifecycles.md#retries)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from adapters.sim.nodes import SimNodeFleet
from application import explain, jobs
from application.gang import GangCoordinator, GangSettings
from application.reconcile import declare_node_lost
from application.supervisor import Supervisor
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL, JobState, MemberState
from domain.node_messages import PrepareOrder
from domain.retry import RetryPolicy
from tests.sim.test_node_launch import NODES, World
from tests.support.context import ADMIN, ALICE

pytestmark = pytest.mark.sim

BACKOFF = 30.0


def policy(attempts: int = 3, on: list[str] | None = None, **more: object) -> RetryPolicy:
    table: dict[str, object] = {"max_attempts": attempts, "backoff_seconds": BACKOFF, **more}
    if on is not None:
        table["on"] = on
    return RetryPolicy.parse(table)


@pytest.fixture
async def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    await w.fleet.connect_all()
    return w


async def steps(w: World, job_id: str, n: int) -> jobs.JobDetails:
    """``n`` steps, checking after each that no two attempts of the job are live at once and
    that a new attempt is reserved only once every member of the one before is final."""
    for _ in range(n):
        await w.step()
        d = await w.job(job_id)
        live = [a for a in d.attempts if a.attempt.state not in ATTEMPT_FINAL]
        assert len(live) <= 1, [a.attempt for a in d.attempts]
        for earlier in d.attempts[:-1]:
            assert all(m.state in MEMBER_FINAL for m in earlier.members), earlier
    return d


async def test_a_failed_exit_starts_a_new_attempt_after_its_backoff(world: World) -> None:
    job_id = await world.submit("nodes/cpu:2", retry=policy())
    await world.all_running(job_id)
    await world.finish_all(job_id, code=3)
    d = await world.until(job_id, {JobState.PENDING})
    ended_at = d.attempts[0].attempt.updated_at
    assert d.attempts[0].attempt.end == "failed" and d.job.not_before is not None
    assert d.job.not_before == ended_at + timedelta(seconds=BACKOFF)
    assert d.job.reason.startswith("attempt 1 failed (")
    assert f"attempt 2 waits for backoff until {d.job.not_before:%H:%M:%S}" in d.job.reason
    why = await explain.explain_job(world.ctx, ALICE, job_id)
    assert (why.kind, why.text) == ("backoff", d.job.reason)  # `tp job why`
    assert await world.live_reservations() == 0  # the envelope is free while it waits
    d = await steps(world, job_id, int(BACKOFF) - 5)
    assert len(d.attempts) == 1 and d.job.state is JobState.PENDING  # still in its backoff
    d = await world.all_running(job_id)
    second = d.attempts[-1]
    assert second.attempt.number == 2
    assert second.attempt.created_at >= ended_at + timedelta(seconds=BACKOFF)
    assert d.job.not_before is None and await world.live_reservations() == 1
    await world.finish_all(job_id, code=0)
    d = await world.until(job_id, {JobState.SUCCEEDED})
    assert [a.attempt.state for a in d.attempts] == ["failed", "succeeded"]


async def test_a_fenced_node_ends_the_attempt_as_node_lost_and_the_next_runs_elsewhere(
    world: World,
) -> None:
    job_id = await world.submit("nodes/cpu:2", retry=policy(on=["node-lost"]))
    d = await world.all_running(job_id)
    lost = d.attempts[0].members[0].node
    assert lost is not None
    await world.fleet.disconnect(lost)  # gone; only the fence says it ended
    d = await steps(world, job_id, 5)
    assert d.job.state is JobState.RUNNING and len(d.attempts) == 1  # unknown, never failed
    assert await declare_node_lost(world.ctx, ADMIN, lost, "powered off") == 1
    d = await world.until(job_id, {JobState.PENDING})
    first = d.attempts[0].attempt
    assert (first.state, first.end) == ("failed", "node-lost")
    assert f"node {lost} declared lost" in d.job.reason
    d = await steps(world, job_id, int(BACKOFF) + 5)
    d = await world.all_running(job_id)
    second = d.attempts[-1]
    assert second.attempt.number == 2
    assert lost not in {m.node for m in second.members}  # placed on the nodes left


async def test_a_stop_never_retries_and_a_policy_runs_out(world: World) -> None:
    stopped = await world.submit("nodes/cpu:1", retry=policy(attempts=5))
    await world.all_running(stopped)
    await jobs.cancel_job(world.ctx, ALICE, stopped)
    d = await world.until(stopped, {JobState.CANCELLED})
    assert len(d.attempts) == 1 and d.attempts[0].attempt.end == "cancelled"

    failing = await world.submit("nodes/cpu:1", retry=policy(attempts=2, backoff_seconds=0))
    for _ in range(2):
        await world.all_running(failing)
        await world.finish_all(failing, code=1)
        d = await world.until(failing, {JobState.PENDING, JobState.FAILED})
    assert d.job.state is JobState.FAILED and len(d.attempts) == 2
    assert d.job.reason.startswith("attempt 2 failed (")
    assert d.job.reason.endswith("that was the last of its policy's 2 attempts")


async def test_an_end_the_policy_does_not_name_or_an_exit_code_it_does_not_list_is_final(
    world: World,
) -> None:
    only_lost = await world.submit("nodes/cpu:1", retry=policy(on=["node-lost"]))
    await world.all_running(only_lost)
    await world.finish_all(only_lost, code=1)
    d = await world.until(only_lost, {JobState.FAILED, JobState.PENDING})
    assert d.job.state is JobState.FAILED and "does not retry failed" in d.job.reason

    codes = await world.submit("nodes/cpu:1", retry=policy(on=["failed"], exit_codes=[137]))
    await world.all_running(codes)
    await world.finish_all(codes, code=2)
    d = await world.until(codes, {JobState.FAILED, JobState.PENDING})
    assert d.job.state is JobState.FAILED and "retried only on 137" in d.job.reason


async def test_a_refused_launch_is_launch_failed_and_retried(tmp_path: Path) -> None:
    w = World(tmp_path)
    refused: set[str] = set()

    def once(order: PrepareOrder) -> str | None:  # the first attempt's image cannot be pulled
        attempt = order.ref.attempt_id
        if not refused or attempt in refused:
            refused.add(attempt)
            return "image missing"
        return None

    w.fleet = SimNodeFleet(w.ctx, NODES, refusal=once)
    await w.fleet.connect_all()
    job_id = await w.submit("nodes/cpu:2", retry=policy(on=["launch-failed"], backoff_seconds=0))
    d = await w.all_running(job_id)
    first = d.attempts[0].attempt
    assert (first.state, first.end, len(d.attempts)) == ("failed", "launch-failed", 2)
    assert "refused: image missing" in first.reason
    assert all(m.state is MemberState.RUNNING for m in d.attempts[1].members)
    assert w.fleet.starts() == {m.id: 1 for m in d.attempts[1].members}


async def test_a_stop_during_the_backoff_ends_the_job_with_no_new_attempt(world: World) -> None:
    job_id = await world.submit("nodes/cpu:1", retry=policy())
    await world.all_running(job_id)
    await world.finish_all(job_id, code=1)
    d = await world.until(job_id, {JobState.PENDING})
    assert d.job.not_before is not None
    await jobs.cancel_job(world.ctx, ALICE, job_id)
    d = await steps(world, job_id, int(BACKOFF) + 5)
    assert d.job.state is JobState.CANCELLED and len(d.attempts) == 1
    assert await world.live_reservations() == 0


async def test_the_lost_node_policy_fences_and_the_attempt_ends_node_lost(
    tmp_path: Path,
) -> None:
    """TUNEPLANE_NODE_LOST_AFTER_SECONDS: a node out of contact that long is fenced by the
    coordinator (never before), which ends its attempt as node-lost, as an operator's fence."""
    w = World(tmp_path)
    w.supervisor = Supervisor(
        w.ctx,
        gangs=GangCoordinator(
            w.ctx,
            GangSettings(
                prepare_timeout=timedelta(seconds=60),
                link_timeout=timedelta(seconds=5),
                lost_after=timedelta(seconds=30),
            ),
        ),
    )
    await w.fleet.connect_all()
    job_id = await w.submit("nodes/cpu:2", retry=policy(on=["node-lost"], backoff_seconds=0))
    d = await w.all_running(job_id)
    lost = d.attempts[0].members[0].node
    assert lost is not None
    await w.fleet.disconnect(lost)
    d = await steps(w, job_id, 20)  # out of contact, not yet for 30 s: unknown, never ended
    assert len(d.attempts) == 1 and d.attempts[0].attempt.end == ""
    d = await w.all_running(job_id, steps=60)
    first = d.attempts[0].attempt
    assert (first.end, len(d.attempts)) == ("node-lost", 2)
    assert "out of contact for more than 0.5 min (policy)" in first.reason
    assert lost not in {m.node for m in d.attempts[1].members}
