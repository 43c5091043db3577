"""Contract: attempts, members, final logs and API tokens."""

from __future__ import annotations

import pytest

from domain.auth import Role, User
from domain.checkpoints import Resume
from domain.errors import Conflict, NotFound
from domain.lifecycle import AttemptState, MemberState
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory
from tests.contract.builders import T0, a_job, a_member, a_token, an_attempt, at

pytestmark = pytest.mark.contract


async def test_attempts_come_back_by_number(uow_factory: UnitOfWorkFactory) -> None:
    job, other = a_job(), a_job()
    attempts = [an_attempt(job, n) for n in (3, 1, 2)]
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.jobs.add(other)
        for attempt in attempts:
            await uow.attempts.add(attempt)
        await uow.attempts.add(an_attempt(other, 1))
        await uow.commit()
    async with uow_factory() as uow:
        assert [a.number for a in await uow.attempts.for_job(job.id)] == [1, 2, 3]
        assert await uow.attempts.get(attempts[0].id) == attempts[0]
        assert await uow.attempts.get("att-missing") is None
        assert await uow.attempts.for_job("job-missing") == []


async def test_attempt_numbers_are_unique_per_job(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(an_attempt(job, 1))
        await uow.commit()
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.attempts.add(an_attempt(job, 1))


async def test_an_attempt_needs_its_job(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.attempts.add(an_attempt(a_job(), 1))


async def test_attempt_update_is_compare_and_set(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    attempt = an_attempt(job, 1)
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        await uow.commit()
    running = attempt.moved(AttemptState.RUNNING, at(5))
    async with uow_factory() as uow:
        await uow.attempts.update(running, AttemptState.LAUNCHING)
        with pytest.raises(Conflict):
            await uow.attempts.update(running, AttemptState.LAUNCHING)
        with pytest.raises(NotFound):
            await uow.attempts.update(an_attempt(job, 9), AttemptState.LAUNCHING)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.attempts.get(attempt.id) == running


async def test_what_an_attempt_resumed_from_is_written_only_by_note_resume(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """An update from an attempt read before the note (the supervisor's tick goes on with the
    attempt it read) keeps the note; a note is written whatever the attempt's state."""
    job = a_job()
    attempt = an_attempt(job, 2)
    said = Resume("checkpoint-200", 1, 200, ("checkpoint-300 of attempt 1 skipped: w: gone",))
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        await uow.attempts.add(an_attempt(job, 1, resume=Resume()))  # as it comes in
        await uow.commit()
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.attempts.note_resume("att-missing", said)
    async with uow_factory() as uow:
        await uow.attempts.note_resume(attempt.id, said)
        await uow.attempts.update(attempt.moved(AttemptState.RUNNING, at(5)), attempt.state)
        await uow.commit()
    async with uow_factory() as uow:
        found = await uow.attempts.for_job(job.id)
        assert found[0].resume == Resume()
        assert found[1].resume == said and found[1].state is AttemptState.RUNNING


async def _job_with_attempt(uow: UnitOfWork) -> str:
    job = a_job()
    attempt = an_attempt(job, 1)
    await uow.jobs.add(job)
    await uow.attempts.add(attempt)
    return attempt.id


async def test_members_come_back_by_index(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        job = a_job()
        attempt = an_attempt(job, 1)
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        members = [a_member(attempt, i) for i in (2, 0, 3, 1)]
        for member in members:
            await uow.members.add(member)
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.members.for_attempt(attempt.id)
        assert [m.index for m in stored] == [0, 1, 2, 3]
        assert stored[0] == members[1]
        with pytest.raises(Conflict):
            await uow.members.add(a_member(attempt, 2))


async def test_member_update_is_compare_and_set(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    attempt = an_attempt(job, 1)
    member = a_member(attempt, 0)
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        await uow.members.add(member)
        await uow.commit()
    starting = member.moved(MemberState.STARTING, at(1), handle="container-1")
    unknown = starting.moved(MemberState.UNKNOWN, at(2), reason="node lost")
    async with uow_factory() as uow:
        await uow.members.update(starting, MemberState.PENDING)
        await uow.members.update(unknown, MemberState.STARTING)
        with pytest.raises(Conflict):
            await uow.members.update(unknown, MemberState.STARTING)
        with pytest.raises(NotFound):
            await uow.members.update(a_member(attempt, 7), MemberState.PENDING)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.members.for_attempt(attempt.id) == [unknown]
        assert await uow.members.get(member.id) == unknown
        assert await uow.members.get("mem-nobody") is None


async def test_saving_a_log_twice_keeps_the_last(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        attempt_id = await _job_with_attempt(uow)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.get(attempt_id, 0) is None
        await uow.logs.save(attempt_id, 0, b"line 1\n", truncated=False)
        await uow.logs.save(attempt_id, 0, b"line 1\n", truncated=False)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.get(attempt_id, 0) == (b"line 1\n", False)
        await uow.logs.save(attempt_id, 0, b"\x00\xff binary tail", truncated=True)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.get(attempt_id, 0) == (b"\x00\xff binary tail", True)


async def test_every_member_keeps_its_own_log(uow_factory: UnitOfWorkFactory) -> None:
    """Issue 19, item 2: member 1's log is its own, never member 0's, and saving one member's
    log leaves the others' as they were."""
    async with uow_factory() as uow:
        attempt_id = await _job_with_attempt(uow)
        await uow.commit()
    async with uow_factory() as uow:
        await uow.logs.save(attempt_id, 0, b"rank 0\n", truncated=False)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.get(attempt_id, 1) is None  # not member 0's
        await uow.logs.save(attempt_id, 1, b"rank 1\n", truncated=True)
        await uow.logs.save(attempt_id, 1024, b"", truncated=False)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.get(attempt_id, 0) == (b"rank 0\n", False)
        assert await uow.logs.get(attempt_id, 1) == (b"rank 1\n", True)
        assert await uow.logs.get(attempt_id, 1024) == (b"", False)
        assert await uow.logs.get(attempt_id, 2) is None


async def test_live_output_pieces_keep_the_first_copy_and_the_limit(
    uow_factory: UnitOfWorkFactory,
) -> None:
    async with uow_factory() as uow:
        job = a_job()
        attempt = an_attempt(job, 1)
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        member = a_member(attempt, 0)
        await uow.members.add(member)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.append_live(member.id, 0, b"hello ", limit=16)
        assert await uow.logs.append_live(member.id, 6, b"world\n", limit=16)
        assert not await uow.logs.append_live(member.id, 0, b"HELLO ", limit=16)  # re-sent
        assert await uow.logs.append_live(member.id, 12, b"0123456789", limit=16)  # cut at 16
        assert not await uow.logs.append_live(member.id, 16, b"beyond", limit=16)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.logs.live(member.id, 0) == [(0, b"hello "), (6, b"world\n"), (12, b"0123")]
        assert await uow.logs.live(member.id, 7) == [(6, b"world\n"), (12, b"0123")]
        assert await uow.logs.live("mem-other", 0) == []


async def test_a_log_needs_its_attempt(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.logs.save("att-missing", 0, b"x", truncated=False)


async def test_tokens_by_hash_and_count(uow_factory: UnitOfWorkFactory) -> None:
    admin = a_token(name="root")
    viewer = a_token(name="carol", revoked_at=T0, revoked_by="root")
    async with uow_factory() as uow:
        assert await uow.tokens.count() == 0
        await uow.policy.put_user(User("root", Role.ADMIN))  # a token names an existing user
        await uow.policy.put_user(User("carol", Role.VIEWER))
        await uow.tokens.add(admin)
        await uow.tokens.add(viewer)
        assert await uow.tokens.count() == 2
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.tokens.by_hash(admin.token_hash) == admin
        assert await uow.tokens.by_hash(viewer.token_hash) == viewer
        assert await uow.tokens.by_hash("0" * 64) is None
        assert await uow.tokens.count() == 2
        with pytest.raises(Conflict):
            await uow.tokens.add(a_token(name="root", token_hash=admin.token_hash))
