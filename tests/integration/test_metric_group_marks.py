"""Groups cut at remembered watermarks (metric_groups.py): a group whose sources' watermarks the
gateway committed itself is cut at them with no statement before its points, and its finish
raises each only where it still holds that value. A watermark another gateway moved sends the
group back (rolled back, stored again with the watermarks read under their lock); a connection
lost in the middle of a group stores nothing and leaves the remembered watermarks as they were;
names and values written as array literals read back exactly."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from domain.telemetry import MemberScope
from domain.telemetry_ports import CollectorCounters
from tests.integration.test_metrics_store import loss, scopes
from tests.support.points import source_batch

pytestmark = pytest.mark.integration
__all__ = ["scopes"]  # the fixture: two attempts of a job, two members each

NOW = datetime(2026, 12, 6, 23, 40, 0, 123456, tzinfo=UTC)
NONE = CollectorCounters()


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresMetrics, PostgresMetrics]]:
    """Two gateways' stores on one database (a pool each)."""
    pools = [await create_pool(pg_url), await create_pool(pg_url)]
    try:
        yield PostgresMetrics(pools[0]), PostgresMetrics(pools[1])
    finally:
        for pool in pools:
            await pool.close()


async def stored(store: PostgresMetrics) -> list[tuple[str, int]]:
    """Every stored point as (source, offset), duplicates kept."""
    rows = await store.pool.fetch(
        "SELECT s.source, p.record_offset FROM metric_points p"
        " JOIN metric_series s ON s.id = p.series_id ORDER BY 1, 2"
    )
    return [(r[0], r[1]) for r in rows]


async def test_later_groups_of_known_sources_take_the_short_path_with_the_same_answers(
    stores: tuple[PostgresMetrics, PostgresMetrics], scopes: list[MemberScope]
) -> None:
    store, _ = stores
    groups = store.groups
    first = await store.append(scopes[0], [loss(range(0, 10))], NONE, NOW)
    assert (first.accepted, groups.fast) == (20, 0)  # a source's first batch: read, then known
    assert groups.marks == {(scopes[0].member_id, "m.jsonl#0"): 9}
    again = await store.append(scopes[0], [loss(range(5, 15))], NONE, NOW)  # a resend, in part
    assert (again.accepted, again.duplicates, groups.fast) == (10, 10, 1)
    dup = await store.append(scopes[0], [loss(range(0, 15))], NONE, NOW)  # all duplicates
    assert (dup.accepted, dup.duplicates, groups.fast) == (0, 30, 2)
    assert groups.marks == {(scopes[0].member_id, "m.jsonl#0"): 14} and groups.moved == 0
    assert await stored(store) == sorted(("m.jsonl#0", o) for o in range(15) for _ in (0, 1))
    mark, updated = await store.pool.fetchrow(
        "SELECT watermark, updated_at FROM telemetry_sources"
    )  # fmt: skip
    assert (mark, updated) == (14, NOW)
    counts = {c.member_id: c for c in await store.counts(scopes[0].job_id)}
    assert (counts[scopes[0].member_id].points, counts[scopes[0].member_id].duplicates) == (30, 40)


async def test_a_watermark_another_gateway_moved_is_read_again_and_nothing_stored_twice(
    stores: tuple[PostgresMetrics, PostgresMetrics], scopes: list[MemberScope]
) -> None:
    a, b = stores
    await a.append(scopes[0], [loss(range(0, 10))], NONE, NOW)  # a remembers 9
    await b.append(scopes[0], [loss(range(5, 20))], NONE, NOW)  # the collector moved to b
    late = await a.append(scopes[0], [loss(range(10, 25))], NONE, NOW)  # back to a: 9 is stale
    assert (late.accepted, late.duplicates) == (10, 20)
    assert (a.groups.moved, a.groups.marks[(scopes[0].member_id, "m.jsonl#0")]) == (1, 24)
    assert await stored(a) == sorted(("m.jsonl#0", o) for o in range(25) for _ in (0, 1))


async def test_two_gateways_sending_one_source_at_once_store_it_once(
    stores: tuple[PostgresMetrics, PostgresMetrics], scopes: list[MemberScope]
) -> None:
    a, b = stores
    await a.append(scopes[0], [loss(range(0, 10))], NONE, NOW)
    await b.append(scopes[0], [loss(range(0, 10))], NONE, NOW)  # b too knows 9 now
    for start in range(10, 60, 10):  # both on the short path, the same batches at once
        got = await asyncio.gather(
            a.append(scopes[0], [loss(range(start, start + 10))], NONE, NOW),
            b.append(scopes[0], [loss(range(start, start + 10))], NONE, NOW),
        )
        assert sorted((r.accepted, r.duplicates) for r in got) == [(0, 20), (20, 0)]
    assert a.groups.fast + b.groups.fast >= 5
    assert await stored(a) == sorted(("m.jsonl#0", o) for o in range(60) for _ in (0, 1))


async def test_a_connection_lost_in_the_middle_of_a_short_group_stores_none_of_it(
    stores: tuple[PostgresMetrics, PostgresMetrics], scopes: list[MemberScope], pg_url: str
) -> None:
    """The group's backend ended (as when its gateway is killed -9) after its points' COPY,
    while its deltas' COPY (with its COMMIT) waits: nothing of the group stays, the resend
    stores it once."""
    store, _ = stores
    store.groups.folder.every = math.inf  # no fold: the group alone writes the deltas
    await store.append(scopes[0], [loss(range(0, 10)), loss(range(0, 2), "n.jsonl#0")], NONE, NOW)
    blocker = await asyncpg.connect(pg_url.replace("+asyncpg", "").replace("+psycopg", ""))
    try:
        await blocker.execute("BEGIN; LOCK TABLE metric_rollup_deltas IN SHARE MODE")
        sending = asyncio.create_task(
            store.append(scopes[0], [loss(range(10, 20)), loss(range(0, 5), "n.jsonl#0")],
                         NONE, NOW)
        )  # fmt: skip
        for _ in range(200):
            pid = await blocker.fetchval(  # the backend waiting to write the deltas
                "SELECT pid FROM pg_locks WHERE NOT granted"
                " AND relation = 'metric_rollup_deltas'::regclass"
            )
            if pid:
                break
            await asyncio.sleep(0.05)
        assert pid, "the group never reached its deltas' COPY"
        await blocker.fetchval("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(Exception):  # noqa: B017 - whichever error the lost connection gives
            await sending
        await blocker.execute("ROLLBACK")
    finally:
        await blocker.close()
    kept = [("m.jsonl#0", o) for o in range(10)] + [("n.jsonl#0", o) for o in range(2)]
    assert await stored(store) == sorted(k for k in kept for _ in (0, 1))
    assert store.groups.marks[(scopes[0].member_id, "m.jsonl#0")] == 9  # as committed
    again = await store.append(
        scopes[0], [loss(range(5, 20)), loss(range(0, 5), "n.jsonl#0")], NONE, NOW
    )
    assert (again.accepted, again.duplicates) == (26, 14)
    want = [("m.jsonl#0", o) for o in range(20)] + [("n.jsonl#0", o) for o in range(5)]
    assert await stored(store) == sorted(w for w in want for _ in (0, 1))


async def test_odd_names_and_values_read_back_exactly_through_the_literals(
    stores: tuple[PostgresMetrics, PostgresMetrics], scopes: list[MemberScope]
) -> None:
    store, _ = stores
    sources = ["a'b\"c\\d,{e} f#0", "ünï $tp$ ');DROP TABLE x;--#1", "NULL#0", "{}#2"]
    values = [math.nan, math.inf, -math.inf, 0.1 + 0.2, -0.0, 1e-308, 2.0**60 + 0.5]
    for first in (0, len(values)):  # a first batch per source (read), then the short path
        batches = [
            source_batch(
                s, "jsonl", ["t,\"q\"'"] * len(values), list(range(first, first + len(values))),
                list(range(first, first + len(values))), [1.7e9 + 0.123456789 * i for i in
                range(len(values))], values,
            )
            for s in sources
        ]  # fmt: skip
        got = await store.append(scopes[1], batches, CollectorCounters(3, 4, 5), NOW)
        assert (got.accepted, got.duplicates) == (len(values) * len(sources), 0)
    assert store.groups.fast == 1
    marks = dict(await store.pool.fetch("SELECT source, watermark FROM telemetry_sources"))
    assert marks == {s: 2 * len(values) - 1 for s in sources}
    for s in await store.series(scopes[1].job_id):
        assert s.source in sources and s.tag == 't,"q"\''
        assert (s.first_step, s.last_step, s.count) == (0, 2 * len(values) - 1, 2 * len(values))
        assert s.last_value == values[-1]
    rows = await store.pool.fetch(
        "SELECT p.value, p.wall_time FROM metric_points p ORDER BY p.series_id, p.step"
    )
    assert len(rows) == 2 * len(values) * len(sources)
    for i, row in enumerate(rows):
        want = values[i % len(values)]
        assert row[0] == want or (math.isnan(want) and math.isnan(row[0]))
        assert row[1] == 1.7e9 + 0.123456789 * (i % len(values))
    counts = {c.member_id: c for c in await store.counts(scopes[1].job_id)}
    mine = counts[scopes[1].member_id]
    assert (mine.corrupt_records, mine.dropped_records, mine.dropped_bytes) == (3, 4, 5)


async def test_a_failure_after_the_points_copy_on_the_short_path_rolls_the_group_back(
    stores: tuple[PostgresMetrics, PostgresMetrics],
    scopes: list[MemberScope],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the short path the group's BEGIN went with its points' COPY: an error after it rolls
    the group back before the connection goes back to the pool (asyncpg would otherwise report
    a connection released inside a transaction), and the resend stores it once."""
    from adapters.postgres import ingest_arrays

    store, _ = stores
    reported: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _loop, context: reported.append(str(context.get("message")))
    )
    await store.append(scopes[0], [loss(range(0, 10))], NONE, NOW)  # the source is known now
    real = ingest_arrays.Rows.rollup_payload

    def fail_once(self: ingest_arrays.Rows, *tiers: object) -> bytes:
        monkeypatch.setattr(ingest_arrays.Rows, "rollup_payload", real)
        raise ValueError("a fault between the points' COPY and the finish")

    monkeypatch.setattr(ingest_arrays.Rows, "rollup_payload", fail_once)
    with pytest.raises(ValueError, match="between the points' COPY"):
        await store.append(scopes[0], [loss(range(10, 20))], NONE, NOW)
    assert await stored(store) == sorted(("m.jsonl#0", o) for o in range(10) for _ in (0, 1))
    assert store.groups.marks[(scopes[0].member_id, "m.jsonl#0")] == 9
    again = await store.append(scopes[0], [loss(range(5, 20))], NONE, NOW)
    assert (again.accepted, again.duplicates, store.groups.fast) == (20, 10, 1)
    assert await stored(store) == sorted(("m.jsonl#0", o) for o in range(20) for _ in (0, 1))
    assert reported == []


def test_asyncpg_still_has_the_copy_entry_the_short_path_uses() -> None:
    """The short path calls asyncpg's ``Connection._copy_in`` (what ``copy_to_table`` calls)
    with its own statement text: an asyncpg that renames or reshapes it fails here first."""
    import inspect

    params = list(inspect.signature(asyncpg.Connection._copy_in).parameters)
    assert params == ["self", "copy_stmt", "source", "timeout"]
