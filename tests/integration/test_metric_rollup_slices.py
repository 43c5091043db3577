"""The gateway's folds in slices (adapters/postgres/metric_rollups.py, ``fold_slice``, ``Folder``):
slices go round the series, fold every acked point once whenever they run between batches, size
themselves from the last round, a fold killed (kill -9) in the middle of its statement leaves
its deltas and nothing merged, and a reader during a slice waits for it and sees every point
acked, including those the slice's snapshot did not see."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.metric_rollups import FOLD_ROWS, Folded, Folder, fold_slice
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from domain.telemetry import STORED_TIERS, MemberScope, View
from tests.contract.builders import a_job, a_member, an_attempt
from tests.integration.test_metric_rollup_folds import _same, ingest, oracle, pending, points
from tests.support.db import plain_dsn

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresMetrics]:
    pool = await create_pool(pg_url)
    metrics = PostgresMetrics(pool)
    metrics.groups.folder.every = math.inf  # the tests fold by hand
    try:
        yield metrics
    finally:
        await pool.close()


@pytest.fixture
async def scopes(pg_engine: AsyncEngine) -> list[MemberScope]:
    """Three members of one attempt: six series (two tags each)."""
    job = a_job()
    async with PostgresUnitOfWork(pg_engine) as uow:
        await uow.jobs.add(job)
        attempt = an_attempt(job, 1)
        await uow.attempts.add(attempt)
        members = [a_member(attempt, i) for i in range(3)]
        for m in members:
            await uow.members.add(m)
        await uow.commit()
    return [MemberScope(job.id, attempt.id, m.id, i) for i, m in enumerate(members)]


async def table_of(store: PostgresMetrics, member: str) -> dict[tuple[str, int, int], object]:
    rows = await store.pool.fetch(
        "SELECT s.tag, r.width, r.bucket, r.first_step, r.last_step, r.minimum, r.maximum,"
        " r.total, r.count, r.last, r.min_wall, r.max_wall FROM metric_rollups r"
        " JOIN metric_series s ON s.id = r.series_id WHERE s.member_id = $1",
        member,
    )
    return {(r[0], r[1], r[2]): tuple(_same(v) for v in r.values())[3:] for r in rows}


async def test_slices_between_batches_fold_every_point_once(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    folder = Folder(store.pool, per_slice=2, least=1, rounds=2)
    sent = {s.member_id: points(40 + s.member_index, 900) for s in scopes}
    for piece in range(9):  # a batch of each member, then a slice: the cursor goes round
        for s in scopes:
            await ingest(store, s, sent[s.member_id][200 * piece : 200 * (piece + 1)])
        before = folder.cursor
        done = await fold_slice(store.pool, folder.cursor, folder.per_slice)
        assert done is not None and done.series <= folder.per_slice
        assert done.series == 0 or done.last > before
        folder.advance(done)
    for _ in range(10):  # what is left, in slices
        if not await pending(store):
            break
        await folder.run()
    assert await pending(store) == 0
    for s in scopes:
        assert await table_of(store, s.member_id) == oracle(sent[s.member_id])


async def test_a_round_asks_each_slice_for_a_tenth_of_the_series(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    for s in scopes:  # six series with deltas
        await ingest(store, s, points(60 + s.member_index, 50))
    folder = Folder(store.pool, least=1, rounds=2)
    series = "SELECT count(DISTINCT series_id) FROM metric_rollup_deltas"
    await folder.run()  # a round starts: six series counted, three a slice
    assert folder.per_slice == 3 and folder.cursor > 0
    assert await store.pool.fetchval(series) == 3
    await folder.run()
    assert await store.pool.fetchval(series) == 0
    await folder.run()  # nothing past the cursor: the round ends
    assert folder.cursor == 0
    folder = Folder(store.pool, least=64)
    await ingest(store, scopes[0], points(70, 100)[100:])  # offsets 50 to 99
    assert await pending(store)
    await folder.run()  # few series: all of them at each tick
    assert (folder.per_slice, folder.cursor, await pending(store)) == (64, 0, 0)
    await ingest(store, scopes[1], points(71, 100)[100:])  # two series at a start
    folder = Folder(store.pool, least=1, rounds=4)
    await folder.run()  # counted two: one a slice
    assert folder.per_slice == 1 and folder.cursor > 0
    late = [(f"{t}_{o % 3}", o, step, w, v) for t, o, step, w, v in points(81, 150)[200:]]
    await ingest(store, scopes[2], late)  # six more series come, past the cursor
    await folder.run()  # seven left past the cursor: in the three ticks left of the round
    assert folder.per_slice == 3
    await folder.run()
    await folder.run()  # the last one: fewer than asked, the round ends
    assert folder.cursor == 0 and await pending(store) == 0
    folder = Folder(store.pool, per_slice=100, cursor=7)
    folder.advance(Folded(FOLD_ROWS * 4, 1, series=100, last=500))  # a backlog
    assert (folder.cursor, folder.per_slice) == (500, 25)  # about FOLD_ROWS deltas a slice


async def _hold_a_rollup_row(store: PostgresMetrics) -> tuple[Any, Any]:
    """A transaction that locks a rollup row every fold of the first member's series updates
    (its coarsest tier's bucket 0): the fold's merge waits on it."""
    conn = await store.pool.acquire()
    tx = conn.transaction()
    await tx.start()
    locked = await conn.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM metric_rollups WHERE width = $1 AND bucket = 0"
        " FOR UPDATE) x",
        STORED_TIERS[-1],
    )
    assert locked > 0
    return conn, tx


async def _waiting(store: PostgresMetrics, like: str) -> int | None:
    """The pid of a backend whose statement starts with ``like`` and waits on a lock."""
    for _ in range(600):
        pid = await store.pool.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE $1 AND wait_event_type = 'Lock'",
            like + "%",
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.05)
    return None


_KILLED_FOLD = textwrap.dedent("""
    import asyncio, sys
    import asyncpg
    from adapters.postgres.metric_rollups import _FOLD_SLICE, _WIDTHS, FOLD_LOCK

    async def main():
        conn = await asyncpg.connect(sys.argv[1])
        async with conn.transaction():
            assert await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", FOLD_LOCK)
            await conn.fetchrow(_FOLD_SLICE, 0, _WIDTHS, 1000)
            print("folded", flush=True)  # never reached: killed while the merge waits

    asyncio.run(main())
""")


async def test_a_fold_killed_in_its_statement_leaves_its_deltas(
    store: PostgresMetrics, scopes: list[MemberScope], pg_url: str
) -> None:
    pts = points(7, 600)
    await ingest(store, scopes[0], pts[:600])
    assert await fold_slice(store.pool, 0, 10) is not None  # the rollup rows exist
    await ingest(store, scopes[0], pts[600:])
    before_rows, before_deltas = await table_of(store, scopes[0].member_id), await pending(store)
    assert before_deltas > 0
    conn, tx = await _hold_a_rollup_row(store)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_FOLD, plain_dsn(pg_url), stdout=asyncio.subprocess.PIPE
    )
    try:
        pid = await _waiting(store, "WITH s AS MATERIALIZED")
        assert pid is not None  # its deltas deleted in its snapshot, its merge waiting
        os.kill(proc.pid, signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await tx.rollback()
        await store.pool.release(conn)
    for _ in range(600):  # the backend finds its client gone and rolls back
        if not await store.pool.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                                         pid):  # fmt: skip
            break
        await asyncio.sleep(0.05)
    assert await pending(store) == before_deltas  # neither merged nor lost
    assert await table_of(store, scopes[0].member_id) == before_rows
    while await pending(store):
        await Folder(store.pool).run()
    assert await table_of(store, scopes[0].member_id) == oracle(pts)


async def test_a_reader_during_a_slice_waits_and_sees_every_acked_point(
    store: PostgresMetrics, scopes: list[MemberScope]
) -> None:
    pts = points(13, 900)
    await ingest(store, scopes[0], pts[:600])
    assert await fold_slice(store.pool, 0, 10) is not None
    await ingest(store, scopes[0], pts[600:1200])
    conn, tx = await _hold_a_rollup_row(store)
    try:
        slice_ = asyncio.create_task(fold_slice(store.pool, 0, 10))
        assert await _waiting(store, "WITH s AS MATERIALIZED") is not None
        await ingest(store, scopes[0], pts[1200:])  # acked after the slice's snapshot
        (loss,) = [i for i in await store.series(scopes[0].job_id) if i.tag == "loss"]
        reader = asyncio.create_task(store.view(loss.id, View(0, 10**9, STORED_TIERS[0])))
        waits = 0
        for _ in range(600):  # the reader's fold waits for the slice's lock
            waits = await store.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'"
            )
            if waits:
                break
            await asyncio.sleep(0.05)
        assert waits == 1 and not reader.done()
    finally:
        await tx.rollback()
        await store.pool.release(conn)
    done = await slice_
    assert done is not None and done.deltas > 0
    got = await reader
    want = sorted((k[2], v) for k, v in oracle(pts).items() if k[:2] == ("loss", STORED_TIERS[0]))
    assert [(b.bucket, _same(b.last), b.count) for b in got] == [
        (bucket, v[6], v[5]) for bucket, v in want
    ]
