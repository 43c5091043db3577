"""The PostgreSQL metrics store: exactly-once ingest by watermark, rollups equal to a brute-force
aggregation, bounded views that keep every bucket's extremes."""

from __future__ import annotations

import asyncio
import math
import random
from collections import deque
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.metric_compaction import (
    COMPACTION_LOCK,
    Compacted,
    compact_blocks,
    keep_compacting,
)
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.telemetry.columns import Points
from domain.telemetry import TIERS, MemberScope, SourceBatch, View, plan_view
from domain.telemetry_ports import CollectorCounters, MemberStatus
from tests.contract.builders import a_job, a_member, an_attempt
from tests.support.points import source_batch

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 3, tzinfo=UTC)
NONE = CollectorCounters()


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresMetrics]:
    pool = await create_pool(pg_url)
    try:
        yield PostgresMetrics(pool)
    finally:
        await pool.close()


@pytest.fixture
async def scopes(pg_engine: AsyncEngine) -> list[MemberScope]:
    """Two attempts of one job with two members each."""
    job = a_job()
    out: list[MemberScope] = []
    async with PostgresUnitOfWork(pg_engine) as uow:
        await uow.jobs.add(job)
        for number in (1, 2):
            attempt = an_attempt(job, number)
            await uow.attempts.add(attempt)
            for index in (0, 1):
                member = a_member(attempt, index)
                await uow.members.add(member)
                out.append(MemberScope(job.id, attempt.id, member.id, index))
        await uow.commit()
    return out


def batch(source: str, records: list[tuple[int, list[tuple[str, int, float]]]]) -> SourceBatch:
    """``records``: (offset, [(tag, step, value), ...])."""
    rows = [(tag, o, step, 1000.0 + step, v) for o, scalars in records for tag, step, v in scalars]
    return source_batch(source, "jsonl", *(list(c) for c in zip(*rows, strict=True)))


def loss(offsets: range, source: str = "m.jsonl#0") -> SourceBatch:
    return batch(source, [(o, [("loss", o, 1.0 / (o + 1)), ("lr", o, 0.1)]) for o in offsets])


async def points(store: PostgresMetrics) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM metric_points"))


async def test_a_resent_batch_stores_nothing_twice(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    scope = scopes[0]
    first = await store.append(scope, [loss(range(0, 10))], NONE, NOW)
    assert (first.accepted, first.duplicates) == (20, 0)
    again = await store.append(scope, [loss(range(0, 10))], NONE, NOW)
    assert (again.accepted, again.duplicates) == (0, 20)
    overlap = await store.append(scope, [loss(range(5, 15))], NONE, NOW)
    assert (overlap.accepted, overlap.duplicates) == (10, 10)
    assert await points(store) == 30
    # the same offsets of another source or member are other records
    await store.append(scope, [loss(range(0, 10), "other.jsonl#0")], NONE, NOW)
    await store.append(scopes[1], [loss(range(0, 10))], NONE, NOW)
    assert await points(store) == 70
    series = {(s.member_id, s.source, s.tag): s for s in await store.series(scope.job_id)}
    main = series[(scope.member_id, "m.jsonl#0", "loss")]
    assert (main.first_step, main.last_step, main.count) == (0, 14, 15)
    assert main.last_value == pytest.approx(1 / 15)
    counts = {c.member_id: c for c in await store.counts(scope.job_id)}
    assert (counts[scope.member_id].points, counts[scope.member_id].duplicates) == (50, 30)


async def test_concurrent_resends_store_once(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    results = await asyncio.gather(
        *(store.append(scopes[0], [loss(range(0, 500))], NONE, NOW) for _ in range(4))
    )
    assert sorted(r.accepted for r in results) == [0, 0, 0, 1000]
    assert await points(store) == 1000


async def test_batches_arriving_together_share_one_transaction_and_each_gets_its_own_answer(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    """Group commit: what many streams send at once is stored in one transaction, each batch
    cut at its source's watermark in arrival order (a resend beside its original stores
    nothing twice), the counters summed per member."""
    before = store.groups.groups
    sent = [
        (scopes[0], [loss(range(0, 10))]),
        (scopes[1], [loss(range(0, 5)), loss(range(0, 3), "other.jsonl#0")]),
        (scopes[0], [loss(range(5, 15))]),  # overlaps the first: 5 records new
        (scopes[2], []),  # counters only
        (scopes[3], [loss(range(0, 7))]),
    ]
    results = await asyncio.gather(*(store.append(s, b, NONE, NOW) for s, b in sent))
    assert [(r.accepted, r.duplicates) for r in results] == [
        (20, 0), (16, 0), (10, 10), (0, 0), (14, 0)
    ]  # fmt: skip
    assert store.groups.groups == before + 1
    assert await points(store) == 60
    counts = {c.member_id: (c.points, c.duplicates) for c in await store.counts(scopes[0].job_id)}
    assert counts[scopes[0].member_id] == (30, 10) and counts[scopes[1].member_id] == (16, 0)
    assert counts[scopes[2].member_id] == (0, 0)


async def test_a_group_with_known_and_new_sources_locks_and_cuts_them_all(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    """Known sources' watermark rows are locked without being written; a group that also
    holds a source's first batch makes its row (and locks every row) in one upsert. A
    watermark row gone (deleted by hand) is made again the same way."""
    await store.append(scopes[0], [loss(range(0, 10))], NONE, NOW)
    results = await asyncio.gather(
        store.append(scopes[0], [loss(range(5, 12))], NONE, NOW),  # known: 2 records new
        store.append(scopes[1], [loss(range(0, 3), "new.jsonl#0")], NONE, NOW),  # first batch
    )
    assert [(r.accepted, r.duplicates) for r in results] == [(4, 10), (6, 0)]
    marks = dict(
        await store.pool.fetch("SELECT source, watermark FROM telemetry_sources ORDER BY 1")
    )
    assert marks == {"m.jsonl#0": 11, "new.jsonl#0": 2}
    await store.pool.execute("DELETE FROM telemetry_sources WHERE source = 'new.jsonl#0'")
    again = await store.append(scopes[1], [loss(range(3, 5), "new.jsonl#0")], NONE, NOW)
    assert (again.accepted, again.duplicates) == (4, 0)
    assert await store.pool.fetchval(
        "SELECT watermark FROM telemetry_sources WHERE source = 'new.jsonl#0'"
    ) == 4  # fmt: skip


async def test_a_batch_that_cannot_be_stored_fails_alone_in_its_group(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    stranger = MemberScope(scopes[0].job_id, scopes[0].attempt_id, "mem-unknown", 9)
    results = await asyncio.gather(
        store.append(scopes[0], [loss(range(0, 10))], NONE, NOW),
        store.append(stranger, [loss(range(0, 10))], NONE, NOW),  # no such member: refused
        store.append(scopes[1], [loss(range(0, 4))], NONE, NOW),
        return_exceptions=True,
    )
    assert isinstance(results[1], Exception)
    assert [(r.accepted, r.duplicates) for r in (results[0], results[2])] == [(20, 0), (8, 0)]  # type: ignore[union-attr]
    assert await points(store) == 28
    again = await store.append(scopes[0], [loss(range(0, 12))], NONE, NOW)
    assert (again.accepted, again.duplicates) == (4, 20)


async def test_a_caller_cancelled_while_its_group_commits_is_stored_once(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    """A stream that goes away while its batch waits for the group (a collector killed) does
    not cancel the group: the batch is stored, its neighbours get their answers, and the
    collector's resend stores nothing twice."""
    before = store.groups.groups
    gone = asyncio.create_task(store.append(scopes[0], [loss(range(0, 10))], NONE, NOW))
    staying = asyncio.create_task(store.append(scopes[1], [loss(range(0, 4))], NONE, NOW))
    await asyncio.sleep(0)  # both queued, the group's transaction under way
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    # one group held both: answered once it committed, the cancelled caller's batch with it
    assert ((await staying).accepted, store.groups.queue) == (8, deque())
    assert store.groups.groups == before + 1 and await points(store) == 28
    again = await store.append(scopes[0], [loss(range(0, 10))], NONE, NOW)
    assert (again.accepted, again.duplicates) == (0, 20)


async def test_a_metrics_connection_released_mid_transaction_is_rolled_back(pg_url: str) -> None:
    """The metrics pool skips asyncpg's reset query (a round trip per group commit); a
    transaction left open at release is still rolled back, and the next user gets a clean
    connection."""
    pool = await create_pool(pg_url, max_size=1)
    try:
        async with pool.acquire() as conn:
            assert conn.get_reset_query() == ""
            await conn.execute("BEGIN")
            await conn.execute("SELECT set_config('application_name', 'left-open', true)")
            await conn.execute("CREATE TEMP TABLE left_behind (x int)")
        async with pool.acquire() as conn:  # the same connection (one in the pool)
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SHOW application_name") == "tuneplane-metrics"
            assert await conn.fetchval("SELECT to_regclass('pg_temp.left_behind')") is None
    finally:
        await pool.close()


async def test_rollups_equal_a_brute_force_aggregation(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    rng = random.Random(7)
    steps = sorted(rng.sample(range(0, 200_000), 3000))
    values = [rng.gauss(0, 1) for _ in steps]
    values[17] = math.nan  # a diverged value is the last of its bucket, never a min or max
    records = [(i, [("x", s, v)]) for i, (s, v) in enumerate(zip(steps, values, strict=True))]
    for chunk in range(0, len(records), 700):  # several batches merge into the same buckets
        part = batch("x.jsonl#0", records[chunk : chunk + 700])
        await store.append(scopes[0], [part], NONE, NOW)
    (series,) = await store.series(scopes[0].job_id)
    for width in TIERS[:5]:
        expected: dict[int, list[tuple[int, float]]] = {}
        for s, v in zip(steps, values, strict=True):
            expected.setdefault(s // width, []).append((s, v))
        got = await store.view(series.id, View(0, 199_999, width))
        assert [b.bucket for b in got] == sorted(expected)
        for b in got:
            pts = expected[b.bucket]
            finite = [v for _, v in pts if math.isfinite(v)]
            assert (b.first_step, b.last_step) == (pts[0][0], pts[-1][0])
            assert b.count == len(finite)
            assert b.minimum == (min(finite) if finite else None)
            assert b.maximum == (max(finite) if finite else None)
            assert b.total == pytest.approx(sum(finite))
            assert b.last == pts[-1][1] or (math.isnan(b.last) and math.isnan(pts[-1][1]))


async def test_a_bounded_view_keeps_a_single_spike(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    n = 100_000
    values = [0.0] * n
    values[54_321] = 1e6
    for i in range(0, n, 20_000):
        part = range(i, i + 20_000)
        walls = [float(s) for s in part]
        b = source_batch("spike.jsonl#0", "jsonl", ["x"] * len(part), part, part, walls,
                         values[i : i + 20_000])  # fmt: skip
        await store.append(scopes[0], [b], NONE, NOW)
    (series,) = await store.series(scopes[0].job_id)
    for start, end, n_points in ((0, n - 1, 1000), (50_000, 60_000, 1000), (0, n - 1, 7)):
        got = await store.view(series.id, plan_view(start, end, n_points))
        assert 0 < len(got) <= n_points
        assert max(x.maximum or 0 for x in got) == 1e6
        assert sum(x.count for x in got) >= end - start + 1
    window = await store.view(series.id, plan_view(54_000, 54_999, 1000))
    assert len(window) == 1000 and window[321].last == 1e6  # raw points in a small window


async def test_the_raw_inspector_pages_in_step_order(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    await store.append(scopes[0], [loss(range(0, 50))], NONE, NOW)
    series = {s.tag: s for s in await store.series(scopes[0].job_id)}
    page = await store.raw(series["loss"].id, 10, 40, -1, 20)
    assert [p.step for p in page] == list(range(10, 30))
    rest = await store.raw(series["loss"].id, page[-1].step, 40, page[-1].offset, 20)
    assert [p.step for p in rest] == list(range(30, 41))


async def test_member_status_says_when_the_attempt_ended(
    store: PostgresMetrics, scopes: list[MemberScope], pg_engine: AsyncEngine
) -> None:
    status = await store.member_status(scopes[0].member_id)
    assert status is not None and status.attempt_ended_at is None
    assert status.attempt_id == scopes[0].attempt_id and status.member_index == 0
    await store.pool.execute(
        "UPDATE attempts SET state = 'failed', updated_at = $2 WHERE id = $1",
        scopes[0].attempt_id,
        NOW,
    )
    ended = await store.member_status(scopes[0].member_id)
    assert ended is not None and ended.attempt_ended_at == NOW
    assert await store.member_status("mem-unknown") is None


async def test_statuses_asked_for_together_are_read_in_one_query(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    asked: list[list[str]] = []
    fetch = store.statuses.fetch

    async def counting(ids: list[str]) -> dict[str, MemberStatus]:
        asked.append(ids)
        return await fetch(ids)

    store.statuses.fetch = counting
    ids = [s.member_id for s in scopes] + ["mem-unknown", scopes[0].member_id]
    got = await asyncio.gather(*(store.member_status(i) for i in ids))
    assert len(asked) == 1 and sorted(asked[0]) == sorted(set(ids))
    assert [g.attempt_id if g else None for g in got] == [
        *(s.attempt_id for s in scopes), None, scopes[0].attempt_id
    ]  # fmt: skip


async def test_a_rolled_back_batch_leaves_no_stale_series_behind(
    store: PostgresMetrics, scopes: list[MemberScope], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream cancelled in the middle of its transaction (a collector killed) rolls back the
    series it made; the next batch must not file its points under their ids (seen in CI)."""
    from adapters.postgres import ingest_arrays

    real = ingest_arrays.Rows.rollup_payload

    def fail_once(self: ingest_arrays.Rows, *tiers: object) -> bytes:
        monkeypatch.setattr(ingest_arrays.Rows, "rollup_payload", real)
        raise ConnectionResetError("the stream went away mid-batch")

    monkeypatch.setattr(ingest_arrays.Rows, "rollup_payload", fail_once)
    with pytest.raises(ConnectionResetError):
        await store.append(scopes[0], [loss(range(0, 10))], NONE, NOW)
    assert await points(store) == 0
    again = await store.append(scopes[0], [loss(range(0, 10))], NONE, NOW)
    assert again.accepted == 20
    visible = await store.pool.fetchval(
        "SELECT count(*) FROM metric_points p JOIN metric_series s ON s.id = p.series_id"
    )
    assert visible == 20


async def blocks(store: PostgresMetrics) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM metric_blocks"))


async def test_a_trickle_of_one_point_blocks_is_merged_without_changing_any_answer(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    """A collector shipping a record at a time leaves a block per point per tag; compaction
    merges each (series, bucket)'s blocks into one sorted block and every query answers the
    same, including a resent record (still refused) and points in the next bucket."""
    scope = scopes[0]
    trickle = [*range(0, 40), *range(4090, 4110)]  # two buckets of the 4,096-step blocks
    shuffled = random.Random(7).sample(trickle, len(trickle))  # steps out of order
    for offset, step in enumerate(shuffled):  # each record shipped alone
        records = [(offset, [("loss", step, 1.0 / (step + 1)), ("lr", step, 0.1)])]
        await store.append(scope, [batch("m.jsonl#0", records)], NONE, NOW)
    await store.append(scopes[1], [loss(range(0, 3))], NONE, NOW)  # few blocks: left alone
    assert await blocks(store) == 2 * len(trickle) + 2
    series = {s.tag: s for s in await store.series(scope.job_id) if s.member_id == scope.member_id}
    before_raw = await store.raw(series["loss"].id, 0, 5000, -1, 1000)
    before_view = await store.view(series["loss"].id, plan_view(0, 4109, 100))

    done = await compact_blocks(store.pool, min_blocks=8)

    assert (done.removed, done.merged) == (2 * len(trickle), 4)  # loss and lr, two buckets each
    assert await blocks(store) == 4 + 2
    assert await store.raw(series["loss"].id, 0, 5000, -1, 1000) == before_raw
    assert await store.view(series["loss"].id, plan_view(0, 4109, 100)) == before_view
    assert [p.step for p in before_raw] == sorted(trickle)
    steps = await store.pool.fetchval(
        "SELECT steps FROM metric_blocks WHERE series_id = $1 AND bucket = 0", series["loss"].id
    )
    assert list(steps) == [*range(40), *range(4090, 4096)]  # one block, sorted
    again = await store.append(scope, [loss(range(10, 11))], NONE, NOW)  # offset 10: old
    assert (again.accepted, again.duplicates) == (0, 2)
    assert await compact_blocks(store.pool, min_blocks=8) == Compacted(0, 0)


async def test_compaction_passes_are_bounded_and_lose_nothing_beside_ingest(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    for scope in scopes:
        for o in range(10):
            await store.append(scope, [loss(range(o, o + 1))], NONE, NOW)
    assert await blocks(store) == 4 * 2 * 10  # 4 members × 2 tags × 10 one-point blocks
    first = await compact_blocks(store.pool, min_blocks=8, limit=3)
    assert (first.removed, first.merged) == (30, 3)
    total = await points(store)

    async def trickle() -> None:  # in offset order, as one collector ships
        for o in range(10, 14):
            await store.append(scopes[0], [loss(range(o, o + 1))], NONE, NOW)

    async def compacting() -> int:
        merged = 0
        for _ in range(4):
            merged += (await compact_blocks(store.pool, min_blocks=2, limit=100)).merged
        return merged

    merged, _ = await asyncio.gather(compacting(), trickle())
    assert merged >= 5  # the five crowded pairs the bounded pass left
    assert await points(store) == total + 4 * 2  # nothing lost, nothing twice
    rest = await compact_blocks(store.pool, min_blocks=2)
    assert await blocks(store) == 8  # one block per series
    assert await points(store) == total + 8 and rest.removed >= rest.merged
    with pytest.raises(ValueError, match="min_blocks"):
        await compact_blocks(store.pool, min_blocks=1)


async def test_one_compactor_at_a_time_the_others_skip_their_pass(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    for o in range(10):
        await store.append(scopes[0], [loss(range(o, o + 1))], NONE, NOW)
    async with store.pool.acquire() as conn, conn.transaction():  # another gateway's pass
        assert await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", COMPACTION_LOCK)
        assert await compact_blocks(store.pool) == Compacted(0, 0)
    assert await compact_blocks(store.pool) == Compacted(20, 2)


async def test_the_gateway_loop_keeps_merging_as_a_trickle_goes_on(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    loop = asyncio.create_task(keep_compacting(store.pool, 0.01, min_blocks=4))
    try:
        for o in range(40):
            await store.append(scopes[0], [loss(range(o, o + 1))], NONE, NOW)
        async with asyncio.timeout(30):
            while await blocks(store) > 2 * 3:  # noqa: ASYNC110 (polls the database)
                await asyncio.sleep(0.01)
        assert await points(store) == 80
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_a_batch_naming_tags_without_points_is_stored(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    """A batch may name tags none of its points has: a collector's spool rows cut from one
    parse of wide records, or a resend cut at the watermark past every point of a tag. Such a
    batch ended every attempt in a KeyError, and the member stored nothing, ever."""
    scope = scopes[0]
    wide = [(o, [(f"w/t{o}_{k}", o, float(k)) for k in range(50)]) for o in range(4)]
    first = await store.append(scope, [batch("wide.jsonl#0", wide[:2])], NONE, NOW)
    assert (first.accepted, first.duplicates) == (100, 0)
    # the resend of records 0-1 with records 2-3: cut at the watermark, records 0-1's tags
    # name no point left in it
    again = await store.append(scope, [batch("wide.jsonl#0", wide)], NONE, NOW)
    assert (again.accepted, again.duplicates) == (100, 100)
    # tag names no point has at all (as a spool row cut from a wider parse carries)
    unused = SourceBatch(
        "wide.jsonl#0", "jsonl", Points.of(["w/never", "w/last"], [10], [1], [10], [1010.0], [1.0])
    )
    assert (await store.append(scope, [unused], NONE, NOW)).accepted == 1
    assert await points(store) == 201
    tags = {s.tag for s in await store.series(scope.job_id)}
    assert len(tags) == 201 and "w/never" not in tags
