"""Blob garbage collection over the real use cases (upload, preview, commit), the in-memory
store and a filesystem blob store: jobs, live previews and young blobs keep theirs; archives
never used and the blobs of expired previews go; a dry run deletes nothing; admins only."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient

from adapters.memory.backend import MemoryBackend
from application import submissions
from application.archives import upload_archive
from application.blob_gc import collect_as, collect_blobs
from application.context import Context
from domain.errors import Forbidden, NotFound
from domain.submission import SourceRef
from entrypoints.api.app import create_app
from tests.support.archives import tar_gz
from tests.support.context import ADMIN, ALICE, FakeClock, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit

DAY = timedelta(days=1)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.now(UTC))  # blobs carry the file system's times


@pytest.fixture
def ctx(tmp_path: Path, clock: FakeClock) -> Context:
    return memory_context(tmp_path, MemoryBackend(), clock)


async def archive(ctx: Context, content: bytes) -> SourceRef:
    """Upload a source archive holding one file of ``content``."""

    async def chunks() -> AsyncIterator[bytes]:
        yield tar_gz({"train.py": content})

    return await upload_archive(ctx, ALICE, chunks(), declared_size=None, declared_digest=None)


def age_all(root: Path, by: timedelta) -> None:
    """Every blob stored so far was stored ``by`` ago."""
    for path in (root / "sha256").rglob("*"):
        if path.is_file():
            at = path.stat().st_mtime - by.total_seconds()
            os.utime(path, (at, at))


async def stored(ctx: Context) -> set[str]:
    assert ctx.blobs is not None
    return {b.digest async for b in ctx.blobs.listing()}


async def test_unused_blobs_go_and_used_or_young_ones_stay(
    ctx: Context, clock: FakeClock, tmp_path: Path
) -> None:
    assert ctx.blobs is not None
    orphan = await archive(ctx, b"never used")
    used = await archive(ctx, b"the job's source")
    confirmed = await submissions.create_preview(ctx, ALICE, an_intent(source=used))
    await submissions.commit(ctx, ALICE, confirmed.id, confirmed.digest, str(uuid.uuid4()))
    abandoned_src = await archive(ctx, b"previewed, never confirmed")
    abandoned = await submissions.create_preview(ctx, ALICE, an_intent(source=abandoned_src))
    job_blobs, abandoned_blobs = confirmed.spec.blobs, abandoned.spec.blobs
    assert used.digest in job_blobs and abandoned_src.digest in abandoned_blobs
    age_all(tmp_path / "blobs", 2 * DAY)
    young = await archive(ctx, b"uploaded just now, its preview is coming")
    everything = await stored(ctx)

    dry = await collect_blobs(ctx, DAY, dry_run=True)
    assert (dry.deleted, dry.deleted_digests) == (1, [orphan.digest])
    assert dry.freed_bytes == orphan.size and dry.kept == len(everything) - 1
    assert await stored(ctx) == everything  # a dry run deletes nothing

    done = await collect_blobs(ctx, DAY)
    assert done.deleted_digests == [orphan.digest]
    assert await stored(ctx) == everything - {orphan.digest}
    with pytest.raises(NotFound):
        await ctx.blobs.read(orphan.digest)

    clock.advance(hours=2)  # the abandoned preview expired (previews live an hour)
    done = await collect_blobs(ctx, DAY)
    assert set(done.deleted_digests) == set(abandoned_blobs)
    assert await stored(ctx) == job_blobs | {young.digest}
    for digest in job_blobs:
        await ctx.blobs.read(digest)  # intact
    assert (await collect_blobs(ctx, DAY)).deleted == 0


async def test_uploading_old_content_again_keeps_it(ctx: Context, tmp_path: Path) -> None:
    first = await archive(ctx, b"old content")
    age_all(tmp_path / "blobs", 2 * DAY)
    again = await archive(ctx, b"old content")  # `tp submit` uploads before each preview
    assert again == first
    assert (await collect_blobs(ctx, DAY)).deleted == 0


async def test_only_admins_collect_and_the_grace_defaults_to_the_configured_one(
    ctx: Context, clock: FakeClock
) -> None:
    orphan = await archive(ctx, b"unused")
    clock.advance(seconds=5)
    with pytest.raises(Forbidden, match="collect unused blobs"):
        await collect_as(ctx, ALICE, None, dry_run=True)
    assert (await collect_as(ctx, ADMIN, None, dry_run=True)).deleted == 0  # younger than a day
    done = await collect_as(ctx, ADMIN, timedelta(0), dry_run=False)
    assert done.deleted_digests == [orphan.digest]


async def test_the_api_process_collects_every_period(
    ctx: Context, clock: FakeClock, tmp_path: Path
) -> None:
    orphan = await archive(ctx, b"unused, and old")
    age_all(tmp_path / "blobs", 2 * DAY)
    app = create_app(ctx, supervise=False, collect_blobs_every=timedelta(seconds=0.01))
    async with AsyncTestClient(app=app), asyncio.timeout(30):
        while orphan.digest in await stored(ctx):  # noqa: ASYNC110 (a pass deletes it)
            await asyncio.sleep(0.01)
