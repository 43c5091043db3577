"""The preview → commit protocol over in-memory adapters (the PostgreSQL path is covered end to
end in tests/e2e/test_idempotent_commit.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from adapters.memory.backend import MemoryBackend
from application import jobs, submissions
from application.auth import authenticate, bootstrap_admin
from application.context import Context
from domain.errors import (
    Conflict,
    Expired,
    Forbidden,
    InvalidInput,
    NotFound,
    RetryKeyReused,
    Unauthenticated,
)
from tests.support.context import ALICE, BOB, VIEWER, FakeClock, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctx(tmp_path: Path, clock: FakeClock) -> Context:
    return memory_context(tmp_path, MemoryBackend(), clock)


async def test_concurrent_identical_commits_make_one_job(ctx: Context) -> None:
    p = await submissions.create_preview(ctx, ALICE, an_intent())
    key = str(uuid.uuid4())
    receipts = await asyncio.gather(
        *(submissions.commit(ctx, ALICE, p.id, p.digest, key) for _ in range(50))
    )
    assert sum(r.created for r in receipts) == 1
    assert len({r.job_id for r in receipts}) == 1
    page = await jobs.list_jobs(ctx, ALICE, states=None, limit=10, cursor=None, everyone=False)
    assert [j.id for j in page.jobs] == [receipts[0].job_id]


async def test_retry_key_reuse_expiry_tampering_and_double_commit(
    ctx: Context, clock: FakeClock
) -> None:
    p1 = await submissions.create_preview(ctx, ALICE, an_intent())
    p2 = await submissions.create_preview(ctx, ALICE, an_intent(params={"command": "echo 2"}))
    key = str(uuid.uuid4())
    await submissions.commit(ctx, ALICE, p1.id, p1.digest, key)
    with pytest.raises(RetryKeyReused):
        await submissions.commit(ctx, ALICE, p2.id, p2.digest, key)
    with pytest.raises(Conflict) as err:  # same preview, another key: one job per preview
        await submissions.commit(ctx, ALICE, p1.id, p1.digest, str(uuid.uuid4()))
    assert "already committed" in err.value.message
    with pytest.raises(Conflict):
        await submissions.commit(ctx, ALICE, p2.id, "sha256:" + "0" * 64, str(uuid.uuid4()))
    clock.advance(hours=2)
    with pytest.raises(Expired):
        await submissions.commit(ctx, ALICE, p2.id, p2.digest, str(uuid.uuid4()))
    replay = await submissions.commit(ctx, ALICE, p1.id, p1.digest, key)  # still answers
    assert not replay.created
    page = await jobs.list_jobs(ctx, ALICE, states=None, limit=10, cursor=None, everyone=False)
    assert len(page.jobs) == 1


async def test_a_replay_with_a_wrong_digest_is_refused_as_a_first_commit_is(
    ctx: Context, clock: FakeClock
) -> None:
    """The same key and preview with a digest not the preview's: 409 digest does not match
    (with its fix), as for a first commit, not "retry key already used for preview P"; the
    identical request still answers with the same job, even after the preview expired."""
    p = await submissions.create_preview(ctx, ALICE, an_intent())
    key = str(uuid.uuid4())
    wrong = "sha256:" + "1" * 64
    with pytest.raises(Conflict) as before:  # not committed yet: the first-time answer
        await submissions.commit(ctx, ALICE, p.id, wrong, key)
    first = await submissions.commit(ctx, ALICE, p.id, p.digest, key)  # the key is still free
    assert first.created
    for other_key in (key, str(uuid.uuid4())):
        with pytest.raises(Conflict) as err:
            await submissions.commit(ctx, ALICE, p.id, wrong, other_key)
        assert f"digest {wrong} does not match preview {p.id}" in err.value.message
        assert (err.value.message, err.value.fix, err.value.field) == (
            before.value.message,
            before.value.fix,
            "digest",
        )
    clock.advance(hours=2)
    again = await submissions.commit(ctx, ALICE, p.id, p.digest, key)
    assert (again.job_id, again.created) == (first.job_id, False)


async def test_retry_keys_are_each_users_own(ctx: Context) -> None:
    """Issue 18, defect 11: the key was global, so bob's commit with a key alice had used was
    refused, naming alice's preview id."""
    key = str(uuid.uuid4())
    a = await submissions.create_preview(ctx, ALICE, an_intent())
    b = await submissions.create_preview(ctx, BOB, an_intent())
    first = await submissions.commit(ctx, ALICE, a.id, a.digest, key)
    second = await submissions.commit(ctx, BOB, b.id, b.digest, key)
    assert first.created and second.created and first.job_id != second.job_id
    assert (await submissions.commit(ctx, BOB, b.id, b.digest, key)).job_id == second.job_id
    b2 = await submissions.create_preview(ctx, BOB, an_intent(params={"command": "echo 2"}))
    with pytest.raises(RetryKeyReused) as err:  # bob's own key: names only bob's preview
        await submissions.commit(ctx, BOB, b2.id, b2.digest, key)
    assert b.id in err.value.message and a.id not in str(err.value)


async def test_visibility_and_roles(ctx: Context) -> None:
    p = await submissions.create_preview(ctx, ALICE, an_intent())
    with pytest.raises(NotFound):  # another user's preview cannot be committed or read
        await submissions.commit(ctx, BOB, p.id, p.digest, str(uuid.uuid4()))
    r = await submissions.commit(ctx, ALICE, p.id, p.digest, str(uuid.uuid4()))
    with pytest.raises(NotFound):
        await jobs.get_job(ctx, BOB, r.job_id)
    assert (await jobs.get_job(ctx, VIEWER, r.job_id)).job.id == r.job_id
    with pytest.raises(Forbidden):
        await jobs.cancel_job(ctx, VIEWER, r.job_id)
    with pytest.raises(Forbidden):
        await submissions.create_preview(ctx, VIEWER, an_intent())
    with pytest.raises(InvalidInput):
        await submissions.commit(ctx, ALICE, p.id, p.digest, "short")
    for who, everyone, seen in ((BOB, True, 0), (VIEWER, False, 0), (VIEWER, True, 1)):
        page = await jobs.list_jobs(ctx, who, states=None, limit=5, cursor=None, everyone=everyone)
        assert len(page.jobs) == seen, (who, everyone)


async def test_first_admin_token_once_and_authentication(ctx: Context) -> None:
    token = await bootstrap_admin(ctx)
    assert token and token.startswith("tp_")
    assert await bootstrap_admin(ctx) is None
    principal = await authenticate(ctx, token)
    assert (principal.name, principal.role) == ("admin", "admin")
    for bad in (None, "", "tp_nope"):
        with pytest.raises(Unauthenticated):
            await authenticate(ctx, bad)


async def test_missing_archive_and_runtime_are_refused(ctx: Context, tmp_path: Path) -> None:
    from domain.submission import SourceRef

    with pytest.raises(InvalidInput) as err:
        await submissions.create_preview(
            ctx, ALICE, an_intent(source=SourceRef("sha256:" + "a" * 64, 5))
        )
    assert err.value.field == "intent.source.digest"
    backend = MemoryBackend(images={})
    strict = memory_context(tmp_path, backend)
    with pytest.raises(InvalidInput) as err:
        await submissions.create_preview(strict, ALICE, an_intent())
    assert "tp runtime build busybox" in err.value.fix
