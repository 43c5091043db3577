"""The supervisor over in-memory adapters: launch, follow, stop, and recover, with a backend
whose members' fates the test decides."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from pathlib import Path

import pytest

from adapters.memory.backend import SIGTERM_EXIT, MemoryBackend, MemoryMember
from application import jobs, submissions
from application.context import Context
from application.explain import explain_job
from application.logs import stream_logs
from application.supervisor import Supervisor
from domain.capsule import StorageCapabilities
from domain.catalog import RuntimeSpec
from domain.errors import NotFound
from domain.fleet import Pool
from domain.lifecycle import JobState
from domain.ports import LaunchRequest
from tests.contract.builders import T0 as NOW
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit
GPU_POOL = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")


async def submit(ctx: Context, command: str = "echo hi") -> str:
    preview = await submissions.create_preview(ctx, ALICE, an_intent(params={"command": command}))
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def state(ctx: Context, job_id: str) -> jobs.JobDetails:
    return await jobs.get_job(ctx, ALICE, job_id)


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def ctx(tmp_path: Path, backend: MemoryBackend) -> Context:
    return memory_context(tmp_path, backend)


async def test_a_job_runs_to_success_and_its_log_is_kept(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()  # claims, launches, then observes it running
    d = await state(ctx, job_id)
    assert d.job.state is JobState.RUNNING and d.attempts[0].attempt.state == "running"
    handle = d.attempts[0].members[0].handle
    assert handle in backend.members

    backend.finish(handle, 0, b"hi\n")
    await sup.tick()
    d = await state(ctx, job_id)
    assert (d.job.state, d.job.exit_code) == ("succeeded", 0)
    assert d.attempts[0].attempt.state == "succeeded"
    assert handle not in backend.members  # released after its log was stored
    chunks = [c async for c in await stream_logs(ctx, ALICE, job_id, follow=False)]
    assert b"".join(chunks) == b"hi\n"
    why = await explain_job(ctx, ALICE, job_id)  # `tp job why`: how it ended, not "is succeeded"
    assert (why.kind, why.text) == (
        "finished",
        "it succeeded: its member of attempt 1 exited with code 0",
    )


async def test_a_failing_member_fails_the_job_with_its_code(
    ctx: Context, backend: MemoryBackend
) -> None:
    backend.behaviour = lambda request: (3, b"boom\n")
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    await sup.tick()
    d = await state(ctx, job_id)
    assert (d.job.state, d.job.exit_code) == ("failed", 3)
    assert "code 3" in d.job.reason and d.attempts[0].members[0].state == "failed"


async def test_long_logs_keep_the_tail_and_say_so(ctx: Context, backend: MemoryBackend) -> None:
    backend.behaviour = lambda request: (0, b"x" * 100 + b"END\n")  # limit is 64 bytes here
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    await sup.tick()
    data = b"".join([c async for c in await stream_logs(ctx, ALICE, job_id, follow=False)])
    assert data.startswith(b"[tuneplane: earlier output was truncated]") and data.endswith(b"END\n")


async def test_unavailable_backend_defers_the_launch_without_failing(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx)
    backend.available = False
    sup = Supervisor(ctx)
    await sup.tick()
    await sup.tick()
    d = await state(ctx, job_id)
    assert d.job.state is JobState.STARTING and d.attempts[0].members[0].state == "pending"
    backend.available = True
    await sup.tick()
    await sup.tick()
    assert (await state(ctx, job_id)).job.state is JobState.RUNNING
    assert backend.launches == 1


async def test_cancel_before_start_launches_nothing(ctx: Context, backend: MemoryBackend) -> None:
    job_id = await submit(ctx)
    d = await jobs.cancel_job(ctx, ALICE, job_id)
    assert d.job.state is JobState.CANCELLED
    await Supervisor(ctx).tick()
    assert backend.launches == 0
    again = await jobs.cancel_job(ctx, ALICE, job_id)  # idempotent
    assert again.job.state is JobState.CANCELLED


async def test_stop_a_running_job(ctx: Context, backend: MemoryBackend) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    await sup.tick()
    d = await jobs.cancel_job(ctx, ALICE, job_id)
    assert d.job.state is JobState.STOPPING and d.attempts[0].attempt.state == "stopping"
    await sup.tick()  # asks the backend to stop
    await asyncio.sleep(0)  # the stop runs as its own task
    await sup.tick()  # sees the exit
    d = await state(ctx, job_id)
    assert d.job.state is JobState.CANCELLED
    assert (d.attempts[0].members[0].state, d.attempts[0].members[0].exit_code) == (
        "stopped",
        SIGTERM_EXIT,
    )
    assert backend.stops == 1
    await sup.close()


async def test_a_vanished_member_fails_the_job(ctx: Context, backend: MemoryBackend) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    backend.members.clear()  # someone removed the container behind our back
    await sup.tick()
    d = await state(ctx, job_id)
    assert d.job.state is JobState.FAILED and "disappeared" in d.job.reason


async def test_two_supervisors_launch_each_member_once(
    ctx: Context, backend: MemoryBackend
) -> None:
    ids = [await submit(ctx, f"echo {i}") for i in range(10)]
    a, b = Supervisor(ctx), Supervisor(ctx)
    for _ in range(3):
        await asyncio.gather(a.tick(), b.tick())
    # the local pool has 4 CPUs: 4 jobs hold them, the others wait holding nothing
    assert backend.launches == 4
    states = [(await state(ctx, i)).job.state for i in ids]
    assert states == [JobState.RUNNING] * 4 + [JobState.PENDING] * 6


async def test_follow_streams_until_the_member_exits(ctx: Context, backend: MemoryBackend) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    handle = (await state(ctx, job_id)).attempts[0].members[0].handle
    assert handle
    stream = await stream_logs(ctx, ALICE, job_id, follow=True, poll_seconds=0.01)
    got: list[bytes] = []

    async def reader() -> None:
        async for chunk in stream:
            got.append(chunk)

    task = asyncio.create_task(reader())
    backend.write(handle, b"one\n")
    await asyncio.sleep(0.01)
    assert b"".join(got) == b"one\n"
    backend.finish(handle, 0, b"two\n")
    await asyncio.wait_for(task, 2)
    assert b"".join(got) == b"one\ntwo\n"


async def test_sweep_releases_finished_members_left_behind(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    handle = (await state(ctx, job_id)).attempts[0].members[0].handle
    assert handle
    kept = dict(backend.members)
    backend.finish(handle, 0)
    await sup.tick()  # records the exit and releases
    assert (await state(ctx, job_id)).job.state is JobState.SUCCEEDED
    backend.members.update(kept)  # as if the process had died before releasing
    stranger = dataclasses.replace(kept[handle].request, member_id="stranger")
    backend.members["mem-stranger"] = MemoryMember(stranger)
    assert await sup.sweep() == 1
    assert handle not in backend.members and "mem-stranger" in backend.members  # not ours: kept


async def test_a_backend_that_stays_unreachable_is_warned_about_once_per_outage(
    ctx: Context, backend: MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """E.g. `tp up` whose members run as host processes, with no container engine: the sweep
    of the local backend used to warn every minute for as long as the control plane ran."""
    sup = Supervisor(ctx)
    backend.available = False
    with caplog.at_level(logging.DEBUG, "tuneplane"):
        for _ in range(3):
            assert await sup.sweep() == 0
        backend.available = True
        assert await sup.sweep() == 0
        backend.available = False
        assert await sup.sweep() == 0  # a new outage is said again
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith(f"sweep of {backend.name}")
    ]
    skipped = (
        f"sweep of {backend.name} skipped: backend {backend.name} is unavailable (retry later)"
    )
    assert said == [
        (logging.WARNING, skipped),
        (logging.DEBUG, skipped),
        (logging.DEBUG, skipped),
        (logging.WARNING, f"sweep of {backend.name}: the backend answers again"),
        (logging.WARNING, skipped),
    ]


async def test_a_tampered_job_capsule_fails_the_job_and_is_never_launched(tmp_path: Path) -> None:
    backend = MemoryBackend(storage=StorageCapabilities(capsule=True))
    ctx = memory_context(tmp_path, backend)
    job_id = await submit(ctx)
    capsule = (await state(ctx, job_id)).job.spec.capsule
    assert capsule is not None
    hexdigest = capsule.blob.removeprefix("sha256:")
    (tmp_path / "blobs" / "sha256" / hexdigest[:2] / hexdigest).write_bytes(b"not the capsule")
    await Supervisor(ctx).tick()
    d = await state(ctx, job_id)
    assert d.job.state is JobState.FAILED and backend.launches == 0
    assert f"its Job Capsule cannot be read: blob {capsule.blob} fails its digest check" in (
        d.job.reason
    )


async def ray_gang(ctx: Context, backend: MemoryBackend, members: int = 3) -> tuple[str, list[str]]:
    """A Ray gang of ``members`` (a driver role and one role per worker) on a runtime whose
    process model is ``ray``; returns the job and its handles by member index."""
    ray = RuntimeSpec("ray-test", "busybox:latest", None, "ray", digest="sha256:" + "e" * 64)
    async with ctx.uow() as uow:
        await uow.runtimes.add(dataclasses.replace(ray, added_by="admin", added_at=NOW))
        await uow.commit()
    roles = ("driver=cpu:1", *(f"worker{i}=cpu:1" for i in range(1, members)))
    intent = an_intent(runtime="ray-test", profiles=roles)
    preview = await submissions.create_preview(ctx, ALICE, intent)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    await Supervisor(ctx).tick()
    d = await state(ctx, receipt.job_id)
    members_ = sorted(d.attempts[0].members, key=lambda m: m.index)
    assert len(members_) == members and all(m.handle for m in members_)
    return receipt.job_id, [m.handle or "" for m in members_]


async def settle(sup: Supervisor) -> None:
    """The end recorded, the others asked to stop (the stops run as their own tasks), and
    their exits seen."""
    await sup.tick()
    await sup.tick()
    await asyncio.sleep(0)
    await sup.tick()


async def test_a_ray_gang_ends_with_its_driver_and_its_workers_are_stopped(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id, handles = await ray_gang(ctx, backend)
    sup = Supervisor(ctx)
    backend.finish(handles[0], 0, b"driver done\n")  # the workers block serving the cluster
    await settle(sup)
    d = await state(ctx, job_id)
    assert (d.job.state, d.job.exit_code) == ("succeeded", 0), d.job.reason
    workers = sorted(d.attempts[0].members, key=lambda m: m.index)[1:]
    assert [(m.state, m.exit_code) for m in workers] == [("succeeded", SIGTERM_EXIT)] * 2
    assert all(m.reason == "stopped: the Ray driver (member 0) ended" for m in workers)


async def test_a_ray_gang_whose_driver_fails_fails_with_the_drivers_code(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id, handles = await ray_gang(ctx, backend)
    sup = Supervisor(ctx)
    backend.finish(handles[0], 2, b"driver error\n")
    await settle(sup)
    d = await state(ctx, job_id)
    assert (d.job.state, d.job.exit_code) == ("failed", 2)
    assert "code 2" in d.job.reason


async def test_a_worker_failing_first_still_fails_a_ray_gang(
    ctx: Context, backend: MemoryBackend
) -> None:
    job_id, handles = await ray_gang(ctx, backend)
    sup = Supervisor(ctx)
    backend.finish(handles[2], 1, b"worker lost\n")
    await settle(sup)
    d = await state(ctx, job_id)
    assert d.job.state == "failed" and "member 2" in d.job.reason


async def test_every_member_keeps_its_own_log_after_the_end(
    tmp_path: Path, backend: MemoryBackend
) -> None:
    """Issue 19, item 2: member 1's log was lost at the end and member=1 answered member 0's."""
    ctx = memory_context(tmp_path, backend, pools=(GPU_POOL,))
    backend.behaviour = lambda r: (0, f"rank {r.member_index}\n".encode())
    preview = await submissions.create_preview(ctx, ALICE, an_intent(profiles=("h200:16",)))
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    sup = Supervisor(ctx)
    await sup.tick()
    await sup.tick()
    d = await state(ctx, receipt.job_id)
    assert d.job.state is JobState.SUCCEEDED and len(d.attempts[0].members) == 2
    why = await explain_job(ctx, ALICE, receipt.job_id)
    assert why.text == "it succeeded: every member (2) of attempt 1 exited with code 0"
    assert backend.members == {}  # both released: only the stored copies are left
    for index in (0, 1):
        stream = await stream_logs(ctx, ALICE, receipt.job_id, follow=False, member=index)
        assert b"".join([c async for c in stream]) == f"rank {index}\n".encode()
    with pytest.raises(NotFound) as refused:
        await stream_logs(ctx, ALICE, receipt.job_id, follow=False, member=2)
    assert "no member 2" in refused.value.message and "0 to 1" in refused.value.message


async def test_a_waiting_member_shows_the_backends_reason_and_never_a_stale_one(
    ctx: Context, backend: MemoryBackend
) -> None:
    """Issue 19, items 3 and 4: a member the backend holds in its queue shows the backend's
    reason (and `tp job why` says it); contact lost then back while it still waits makes it
    starting again with the queue's reason, not "control contact … lost"; once it runs, no
    reason is left."""

    def queued(request: LaunchRequest) -> None:
        backend.waiting[request.member_id] = "queued: Priority"

    backend.behaviour = queued
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    member = (await state(ctx, job_id)).attempts[0].members[0]
    assert (member.state, member.reason) == ("starting", "queued: Priority")
    backend.waiting[member.id] = "queued: Resources"
    await sup.tick()
    member = (await state(ctx, job_id)).attempts[0].members[0]
    assert (member.state, member.reason) == ("starting", "queued: Resources")
    why = await explain_job(ctx, ALICE, job_id)
    assert why.text.endswith("; member 0 waits to start: queued: Resources"), why.text
    backend.lost_nodes.add("local")
    await sup.tick()
    member = (await state(ctx, job_id)).attempts[0].members[0]
    assert (member.state, member.reason) == ("unknown", "control contact with its node is lost")
    backend.lost_nodes.clear()
    await sup.tick()
    member = (await state(ctx, job_id)).attempts[0].members[0]
    assert (member.state, member.reason) == ("starting", "queued: Resources")
    del backend.waiting[member.id]
    await sup.tick()
    member = (await state(ctx, job_id)).attempts[0].members[0]
    assert (member.state, member.reason) == ("running", "")
    assert member.handle is not None
    backend.finish(member.handle, 0, b"done\n")
    await sup.tick()
    d = await state(ctx, job_id)
    assert (d.job.state, d.attempts[0].members[0].reason) == ("succeeded", "")


async def test_a_preemption_the_backend_proves_is_the_attempts_end_and_its_policy_retries(
    ctx: Context, backend: MemoryBackend
) -> None:
    """A backend whose scheduler took a member back says so (``Observation.cause``): the
    attempt ends ``preempted`` and a policy that retries preemption queues the job again; a
    plain exit of the next attempt is ``failed`` and, not named by the policy, final."""
    from domain.retry import RetryPolicy

    policy = RetryPolicy.parse({"max_attempts": 3, "on": ["preempted"], "backoff_seconds": 0})
    intent = an_intent(params={"command": "train"}, retry=policy)
    preview = await submissions.create_preview(ctx, ALICE, intent)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    sup = Supervisor(ctx)
    await sup.tick()
    d = await state(ctx, receipt.job_id)
    handle = d.attempts[0].members[0].handle
    assert handle is not None
    backend.finish(handle, 143, cause="preempted", why="evicted by Kueue: Preempted")
    await sup.tick()
    d = await state(ctx, receipt.job_id)
    assert d.job.state is JobState.PENDING, d.job
    assert d.attempts[0].attempt.end == "preempted"
    assert d.job.reason.startswith("attempt 1 preempted (")
    await sup.tick()  # backoff 0: admitted and launched again
    d = await state(ctx, receipt.job_id)
    assert len(d.attempts) == 2 and d.job.state is JobState.RUNNING
    second = d.attempts[1].members[0].handle
    assert second is not None
    backend.finish(second, 1)
    await sup.tick()
    d = await state(ctx, receipt.job_id)
    assert d.job.state is JobState.FAILED and d.attempts[1].attempt.end == "failed"
    assert "does not retry failed" in d.job.reason
