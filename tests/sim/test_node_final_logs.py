"""A member's final log is stored before its job reads ended, on the node backend, whatever the
order its exit and its log reach the gateway in (docs/node-backend.md, "Logs").

A member that exits while its node's stream is down is told by the next Hello (from the
daemon's journal), and its final log can only follow the Welcome: the Hello says such an exit
``log_pending``, the gateway holds it, and the daemon says it again after the log. Simulated:
the real supervisor, coordinator, gateway and daemon use cases over in-memory adapters; the
control plane looks (a supervisor tick) at the worst moment, right after the Hello.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from application.enrollment import NodeIdentity
from domain.lifecycle import JOB_FINAL, JobState
from domain.node_messages import LogChunk
from domain.node_protocol import Phase
from tests.sim.test_node_launch import World

pytestmark = pytest.mark.sim

LIMIT = 64  # the test context's max_log_bytes: a stored log is its last 64 bytes


@pytest.fixture
async def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    await w.fleet.connect_all()
    return w


def output(index: int) -> bytes:
    return f"member {index}: loss 0.01, done\n".encode()


async def final_logs(world: World, job_id: str) -> dict[int, tuple[bytes, bool]]:
    """The final logs stored for the job's last attempt, by member index."""
    d = await world.job(job_id)
    attempt = d.attempts[-1]
    found: dict[int, tuple[bytes, bool]] = {}
    async with world.ctx.units.jobs() as uow:
        for m in attempt.members:
            stored = await uow.logs.get(attempt.attempt.id, m.index)
            if stored is not None:
                found[m.index] = stored
    return found


async def check(world: World, job_id: str) -> JobState:
    """The invariant: once the job reads ended, every member's final log is stored."""
    d = await world.job(job_id)
    if d.job.state in JOB_FINAL:
        stored = await final_logs(world, job_id)
        indexes = {m.index for m in d.attempts[-1].members}
        assert set(stored) == indexes, (
            f"job {job_id} reads {d.job.state} without the final log of member(s) "
            f"{sorted(indexes - set(stored))}"
        )
    return d.job.state


async def until_ended(world: World, job_id: str, steps: int = 30) -> JobState:
    for _ in range(steps):
        state = await check(world, job_id)
        if state in JOB_FINAL:
            return state
        await world.step()
    raise AssertionError(f"job {job_id} still {state} after {steps} steps")


async def running_with_one_away(world: World, index: int = 1) -> tuple[str, str, str]:
    """A gang of four runs; member ``index``'s node loses its stream and every member exits 0.
    Returns (job id, the away member's id, its node)."""
    job_id = await world.submit()
    d = await world.all_running(job_id)
    away = next(m for m in d.attempts[-1].members if m.index == index)
    assert away.node is not None
    world.fleet.partition(away.node)
    for m in d.attempts[-1].members:
        assert world.fleet.finish(m.id, 0, output(m.index))
    for _ in range(5):  # the others' exits are recorded; the away one is journalled only
        await world.step()
        assert await check(world, job_id) is JobState.RUNNING
    entry = world.fleet.nodes[away.node].journal.get(away.id)
    assert entry is not None and entry.phase is Phase.EXITED
    return job_id, away.id, away.node


async def test_an_exit_told_by_a_hello_ends_the_job_only_once_its_final_log_is_stored(
    world: World,
) -> None:
    job_id, _, node = await running_with_one_away(world)
    await world.fleet.heal(node)  # the Hello tells the exit; the log is still on its way
    await world.supervisor.tick()  # the control plane looks now
    assert await check(world, job_id) is JobState.RUNNING
    assert await until_ended(world, job_id) is JobState.SUCCEEDED
    stored = await final_logs(world, job_id)
    assert stored == {i: (output(i), False) for i in range(4)}


async def test_a_stream_cut_right_after_the_welcome_holds_the_end_until_the_next_one(
    world: World,
) -> None:
    job_id, _, node = await running_with_one_away(world)
    for _ in range(3):  # welcomed, then cut before anything the node sent after it arrives
        await world.fleet.heal(node)
        world.fleet.partition(node)
        await world.step()
        assert await check(world, job_id) is JobState.RUNNING
    await world.fleet.heal(node)  # a stream that stays up: log, then exit
    assert await until_ended(world, job_id) is JobState.SUCCEEDED
    assert (await final_logs(world, job_id))[1] == (output(1), False)


async def test_a_daemon_killed_after_the_log_and_before_the_exit_ends_it_at_its_next_start(
    world: World,
) -> None:
    job_id = await world.submit()
    d = await world.all_running(job_id)
    victim = next(m for m in d.attempts[-1].members if m.index == 2)
    assert victim.node is not None
    node = world.fleet.nodes[victim.node]
    for m in d.attempts[-1].members:
        world.fleet.finish(m.id, 0, output(m.index))
    assert node.agent is not None and node.session is not None
    await node.agent.watch_once()  # the log, then the exit, queued on the stream
    sent = [(seq, body) for seq, body in node.outbox if isinstance(body, LogChunk)]
    assert any(body.last and not body.live for _, body in sent)  # the final log is there
    for seq, body in sent:  # the log arrives; the daemon dies before its exit does
        assert await world.fleet.control.handle(node.session, seq, body) is None
    await world.fleet.crash_daemon(victim.node)
    for _ in range(3):
        await world.step()
        assert await check(world, job_id) is JobState.RUNNING
    await world.fleet.connect(victim.node)  # a new daemon: recovers, Hello, Welcome
    await world.supervisor.tick()
    assert await until_ended(world, job_id) is JobState.SUCCEEDED
    assert (await final_logs(world, job_id))[2] == (output(2), False)


async def test_a_log_the_engine_lost_is_stored_as_a_line_that_says_so_and_the_job_ends(
    world: World,
) -> None:
    job_id, member_id, node = await running_with_one_away(world)
    container = world.fleet.nodes[node].runtime.containers[f"c-{member_id}"]
    container.log_lost = "the engine lost its output"
    await world.fleet.heal(node)
    await world.supervisor.tick()
    assert await until_ended(world, job_id) is JobState.SUCCEEDED
    data, _ = (await final_logs(world, job_id))[1]
    assert data == b"[tuneplane: log collection failed: the engine lost its output]\n"[-LIMIT:]


async def test_a_log_bigger_than_a_piece_arrives_whole_before_the_end(world: World) -> None:
    job_id = await world.submit()
    d = await world.all_running(job_id)
    away = next(m for m in d.attempts[-1].members if m.index == 3)
    assert away.node is not None
    world.fleet.partition(away.node)
    big = b"x" * (2 * 1024 * 1024 + 5) + b"the end\n"  # three LogChunks (1 MiB each)
    for m in d.attempts[-1].members:
        world.fleet.finish(m.id, 0, big if m.index == 3 else output(m.index))
    for _ in range(3):
        await world.step()
    await world.fleet.heal(away.node)
    await world.supervisor.tick()
    assert await until_ended(world, job_id) is JobState.SUCCEEDED
    assert (await final_logs(world, job_id))[3] == (big[-LIMIT:], True)


async def test_a_node_that_never_comes_back_never_ends_its_member(world: World) -> None:
    """Absence of evidence is never failure: the exit is only in the away node's journal."""
    job_id, _, _ = await running_with_one_away(world)
    for _ in range(20):
        await world.step()
        assert await check(world, job_id) not in JOB_FINAL


async def test_an_older_daemons_exit_in_its_hello_is_recorded_at_once(world: World) -> None:
    """Wire compatibility: a daemon that predates ``log_pending`` never sets it; its Hello's
    exit is recorded as it comes (its log follows the Welcome, as before)."""
    job_id, member_id, name = await running_with_one_away(world)
    node = world.fleet.nodes[name]
    assert node.agent is not None and node.session is not None
    await world.fleet.control.close(node.session)
    hello = await node.agent.hello(world.fleet.capacity, "10.0.0.1", "old")
    [pending] = [r for r in hello.journal if r.ref.member_id == member_id]
    assert pending.log_pending  # what this daemon says
    old = replace(hello, journal=tuple(replace(r, log_pending=False) for r in hello.journal))
    node.session = await world.fleet.control.open(NodeIdentity(name, f"cred-{name}"), old)
    d = await world.job(job_id)
    async with world.ctx.uow() as uow:
        launches = await uow.launches.members(d.attempts[-1].attempt.id)
    [launch] = [m for m in launches if m.member_id == member_id]
    assert launch.phase is Phase.EXITED
