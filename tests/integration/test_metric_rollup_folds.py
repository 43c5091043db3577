"""Rollups folded off the ack path (adapters/postgres/metric_rollups.py, migration 0033): what the
folds leave in ``metric_rollups`` equals the domain's rollup of every point acked, whenever and
in how many pieces they fold, a fold that fails leaves its deltas for the next, and a reader
sees what was acked before any fold."""

from __future__ import annotations

import math
import random
import struct
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.metric_rollups import _FOLD_OLDEST, _WIDTHS, FOLD_LOCK, fold_oldest
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from domain.telemetry import STORED_TIERS, Bucket, MemberScope, View, rollup
from domain.telemetry_ports import CollectorCounters
from tests.contract.builders import a_job, a_member, an_attempt
from tests.support.points import source_batch

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 6, tzinfo=UTC)
NONE = CollectorCounters()


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresMetrics]:
    pool = await create_pool(pg_url)
    metrics = PostgresMetrics(pool)
    metrics.groups.folder.every = math.inf  # the tests fold by hand
    metrics.groups.folder.last = time.monotonic()
    try:
        yield metrics
    finally:
        await pool.close()


@pytest.fixture
async def scope(pg_engine: AsyncEngine) -> MemberScope:
    job = a_job()
    async with PostgresUnitOfWork(pg_engine) as uow:
        await uow.jobs.add(job)
        attempt = an_attempt(job, 1)
        await uow.attempts.add(attempt)
        member = a_member(attempt, 0)
        await uow.members.add(member)
        await uow.commit()
    return MemberScope(job.id, attempt.id, member.id, 0)


Point = tuple[str, int, int, float, float]  # tag, offset, step, wall, value


def points(seed: int, n: int) -> list[Point]:
    """Two tags; steps that repeat across batches (a restarted run logs a step again: the later
    record's value is the bucket's last), a NaN, and buckets of every tier crossed."""
    rng = random.Random(seed)
    out: list[Point] = []
    step = 0
    for offset in range(n):
        step = max(0, step + rng.choice([1, 1, 2, 37, 600, -3]))
        value = math.nan if offset == n // 3 else rng.gauss(0, 1)
        for tag in ("loss", "lr"):
            out.append((tag, offset, step, 1e9 + step, value if tag == "loss" else -value))
    return out


async def ingest(store: PostgresMetrics, scope: MemberScope, pts: list[Point]) -> None:
    batch = source_batch("m.jsonl#0", "jsonl", *(list(c) for c in zip(*pts, strict=True)))
    await store.append(scope, [batch], NONE, NOW)


async def table(store: PostgresMetrics) -> dict[tuple[str, int, int], tuple[object, ...]]:
    rows = await store.pool.fetch(
        "SELECT s.tag, r.width, r.bucket, r.first_step, r.last_step, r.minimum, r.maximum,"
        " r.total, r.count, r.last, r.min_wall, r.max_wall FROM metric_rollups r"
        " JOIN metric_series s ON s.id = r.series_id"
    )
    return {(r[0], r[1], r[2]): tuple(_same(v) for v in r.values())[3:] for r in rows}


def oracle(pts: list[Point]) -> dict[tuple[str, int, int], tuple[object, ...]]:
    tags = {"loss": 0, "lr": 1}
    tiers = rollup((tags[t], step, wall, value) for t, _, step, wall, value in pts)
    names = {i: t for t, i in tags.items()}
    return {
        (names[series], width, bucket): tuple(_same(v) for v in _fields(b))
        for width in STORED_TIERS
        for (series, bucket), b in tiers[width].items()
    }


def _fields(b: Bucket) -> tuple[object, ...]:
    return (b.first_step, b.last_step, b.minimum, b.maximum, b.total, b.count, b.last,
            b.min_wall, b.max_wall)  # fmt: skip


def _same(v: object) -> object:
    """NaN equal to NaN, totals to 9 digits (sums in another order)."""
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else round(v, 9)
    return v


async def pending(store: PostgresMetrics) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM metric_rollup_deltas"))


async def test_folds_in_pieces_between_batches_equal_the_domains_rollup(
    store: PostgresMetrics, scope: MemberScope
) -> None:
    pts = points(26, 3000)
    rng = random.Random(1)
    cuts = sorted(rng.sample(range(1, len(pts) // 2), 24))
    pieces = [pts[2 * a : 2 * b] for a, b in zip([0, *cuts], [*cuts, len(pts) // 2], strict=True)]
    for piece in pieces:
        await ingest(store, scope, piece)
        if rng.random() < 0.5:  # a fold of a few deltas at a time, at random points
            assert await fold_oldest(store.pool, limit=rng.randint(1, 40)) is not None
    while await pending(store):
        await fold_oldest(store.pool, limit=25)
    assert await table(store) == oracle(pts)


async def test_a_failed_fold_leaves_its_deltas_for_the_next(
    store: PostgresMetrics, scope: MemberScope
) -> None:
    pts = points(3, 400)
    await ingest(store, scope, pts[:300])
    await ingest(store, scope, pts[300:])
    before = await pending(store)
    async with store.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.fetchrow(_FOLD_OLDEST, 10**6, _WIDTHS)
        await tx.rollback()  # the process died mid-fold
    assert await pending(store) == before > 0
    assert await table(store) == {}
    folded = await fold_oldest(store.pool)
    assert folded is not None and folded.deltas == before and await pending(store) == 0
    assert await table(store) == oracle(pts)


async def test_a_fold_skips_its_pass_while_another_holds_the_lock(
    store: PostgresMetrics, scope: MemberScope
) -> None:
    await ingest(store, scope, points(5, 50))
    async with store.pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", FOLD_LOCK)
        assert await fold_oldest(store.pool) is None
    assert await pending(store) > 0


async def test_a_reader_sees_every_acked_point_before_any_fold(
    store: PostgresMetrics, scope: MemberScope
) -> None:
    pts = points(9, 500)
    await ingest(store, scope, pts)
    assert await pending(store) > 0
    expected = oracle(pts)
    for info in await store.series(scope.job_id):
        for width in STORED_TIERS[:3]:
            got = await store.view(info.id, View(0, 10**9, width))
            want = sorted((k[2], v) for k, v in expected.items() if k[:2] == (info.tag, width))
            assert [(b.bucket, _same(b.last), b.count) for b in got] == [
                (bucket, v[6], v[5]) for bucket, v in want
            ]
        assert await store.steps_between(info.id, 1e9, 2e9) is not None
    assert await pending(store) == 0  # the readers folded their series


async def test_the_gateway_folds_while_batches_arrive(
    store: PostgresMetrics, scope: MemberScope
) -> None:
    pts = points(11, 200)
    store.groups.folder.every = 0.0
    await ingest(store, scope, pts)
    assert store.groups.folding is not None
    await store.groups.folding  # started after the group committed, off its ack
    assert await pending(store) == 0
    assert await table(store) == oracle(pts)


async def test_the_deltas_keep_every_float_bit_for_bit(
    store: PostgresMetrics, scope: MemberScope
) -> None:
    """A group's deltas go in as array literals with its finish: each value reads back as the
    same double (infinities, NaN, the smallest subnormal, -0.0, the largest finite, 0.1)."""
    odd = [math.inf, -math.inf, math.nan, 5e-324, -0.0, 1.7976931348623157e308, 0.1, 1 / 3]
    width = STORED_TIERS[0]  # a point per finest bucket: its delta holds the point's values
    pts = [("loss", i, i * width, v if math.isfinite(v) else 1.0, v) for i, v in enumerate(odd)]
    await ingest(store, scope, pts)
    rows = await store.pool.fetch(
        "SELECT minimum, maximum, total, last, min_wall, max_wall FROM metric_rollup_deltas"
        " ORDER BY bucket"
    )

    def bits(v: float) -> bytes:
        return struct.pack(">d", math.nan if math.isnan(v) else v)

    want = [
        [v if math.isfinite(v) else math.nan] * 2 + [v if math.isfinite(v) else 0.0, v, w, w]
        for _, _, _, w, v in pts
    ]
    assert [[bits(x) for x in r.values()] for r in rows] == [[bits(x) for x in r] for r in want]
