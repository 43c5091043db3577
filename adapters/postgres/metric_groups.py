"""Group commit for the metrics store: the batches of many collector streams in one transaction.

Each stream waits for its batch's transaction before it acknowledges it, so with a transaction
per batch the gateway paid about nine round trips and a commit (an fsync) per batch: at
thousands of streams, the database's round trips and commits, not the points, bounded ingest.
``GroupedAppends`` queues the batches that arrive while a transaction is under way and stores
them together in the next one (at most ``MAX_GROUP`` batches, ``FLUSHERS`` transactions at a
time), each with the same statements as one batch: lock the sources' watermark rows (in
(member, source) order, so concurrent groups and gateways cannot deadlock: a ``SELECT … FOR NO
KEY UPDATE`` when every row exists, else one upsert that makes the missing) unless the gateway
remembers every one as it committed it, cut each batch at its source's watermark in arrival
order (a resend stores nothing twice, even beside its original in the same group), make missing
series, COPY the points, then one finish (the series' latest values, the watermarks raised only
where they still hold what the cut assumed, else the group rolls back and is stored again under
the lock: docs/telemetry.md, "Three round trips a group", and the members' counters), then COPY
the rollups' deltas of the finest stored tier (folded into every tier off the ack path:
``metric_rollups.py``) with the ``COMMIT``.

Every batch gets its own ``Appended``, the same as if it had been stored alone. If a group's
transaction fails, its batches are stored again one transaction each, so one bad batch fails only
its own stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

import asyncpg
import numpy as np

from adapters.postgres.ingest_arrays import Rows
from adapters.postgres.metric_group_sql import (
    COPY_BLOCKS,
    COPY_DELTAS_COMMIT,
    FINISH,
    LOCK_MARKS,
    NEW_SERIES,
    SERIES_IDS,
    WATERMARKS,
    finish_params,
)
from adapters.postgres.metric_rollups import Folder
from adapters.telemetry.columns import Points
from domain.telemetry import STORED_TIERS, Appended, MemberScope, SourceBatch
from domain.telemetry_ports import CollectorCounters

MAX_GROUP = 512  # batches in one transaction
FLUSHERS = 2  # transactions under way at once (one gathers while the other commits)
_NO_STEP = 2**63 - 1

MAX_MARKS = 100_000  # watermarks remembered at most (then forgotten, read again as needed)

SeriesKey = tuple[str, str, str]  # (member, source, tag)


class _Moved(Exception):
    """A remembered watermark was not the stored one: the group is rolled back and stored again
    with its watermarks read (and locked) first."""


@dataclass
class Entry:
    """One collector batch waiting for its transaction."""

    scope: MemberScope
    batches: Sequence[SourceBatch]
    counters: CollectorCounters
    now: datetime
    done: asyncio.Future[Appended]


@dataclass
class GroupedAppends:
    pool: asyncpg.Pool
    series: dict[SeriesKey, int] = field(default_factory=dict)  # committed series' ids
    queue: deque[Entry] = field(default_factory=deque)
    flushers: int = 0
    marks: dict[tuple[str, str], int] = field(default_factory=dict)  # committed watermarks
    groups: int = 0  # transactions committed (for benchmarks and tests)
    fast: int = 0  # of them cut at remembered watermarks (no statement before the points)
    moved: int = 0  # groups stored again: a remembered watermark had moved
    folder: Folder = field(init=False)  # folds the rollups' deltas while batches arrive
    folding: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.folder = Folder(self.pool)

    async def append(
        self,
        scope: MemberScope,
        batches: Sequence[SourceBatch],
        counters: CollectorCounters,
        now: datetime,
    ) -> Appended:
        done: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
        self.queue.append(Entry(scope, batches, counters, now, done))
        if self.flushers < FLUSHERS:
            self.flushers += 1
            asyncio.get_running_loop().create_task(self._flush())
        # no shield: a caller cancelled cancels ``done`` only; the group is its flusher's task
        # and still stores the batch (the resend is cut by the watermark), ``_settle`` skips it
        return await done

    async def _flush(self) -> None:
        try:
            while self.queue:
                group = [self.queue.popleft() for _ in range(min(MAX_GROUP, len(self.queue)))]
                try:
                    await self._store(group)
                except asyncio.CancelledError as exc:  # the process is stopping
                    for entry in group:
                        _settle(entry.done, exc)
                    raise
                except Exception as exc:
                    if len(group) == 1:
                        _settle(group[0].done, exc)
                        continue
                    for entry in group:  # each alone: only the culprit fails
                        if entry.done.done():  # settled (committed), or its caller cancelled
                            continue
                        try:
                            await self._store([entry])
                        except Exception as alone:
                            _settle(entry.done, alone)
        finally:
            self.flushers -= 1

    async def _store(self, group: list[Entry]) -> None:
        """Store the group in one transaction and settle its batches as soon as it committed:
        before the connection goes back to the pool (a loop turn the acks need not wait for)."""
        fresh: dict[SeriesKey, int] = {}
        known = self._remembered(group)
        async with self.pool.acquire() as conn:
            outcome = None
            if known is not None:
                try:
                    outcome = await self._transaction(conn, group, fresh, known)
                except _Moved:  # rolled back: read the watermarks under their lock, and again
                    self.moved += 1
                    fresh.clear()
                    known = None
            if outcome is None:
                outcome = await self._transaction(conn, group, fresh, None)
            results, marks = outcome
            # only now: a series id cached from a transaction that rolled back would file every
            # later point of that series under a row that is not there; the same for watermarks
            self.series.update(fresh)
            if len(self.marks) + len(marks) > MAX_MARKS:
                self.marks.clear()
            self.marks.update(marks)
            self.groups += 1
            self.fast += known is not None
            for entry, result in zip(group, results, strict=True):
                _settle(entry.done, result)
            if self.folder.due():  # off the ack path: the acks of this group do not wait for it
                self.folding = asyncio.get_running_loop().create_task(self.folder.run())

    async def _transaction(
        self,
        conn: Any,
        group: list[Entry],
        fresh: dict[SeriesKey, int],
        known: dict[tuple[str, str], int] | None,
    ) -> tuple[list[Appended], dict[tuple[str, str], int]]:
        """The group in one transaction, begun with its first statement and ended by its deltas'
        COPY (``_Begin``, ``COPY_DELTAS_COMMIT``: two round trips fewer than statements of
        their own); rolled back on any error before the connection goes back to the pool."""
        try:
            results, marks, deltas = await self._write(conn, group, fresh, known, _Begin(conn))
            if deltas is None:
                await conn.execute("COMMIT")
            else:  # asyncpg reads past the COPY's completion to the COMMIT's
                await conn._copy_in(COPY_DELTAS_COMMIT, memoryview(deltas), None)
        except Exception:
            if not conn.is_closed() and conn.is_in_transaction():
                with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
                    await conn.execute("ROLLBACK")
            raise
        return results, marks

    def _remembered(self, group: list[Entry]) -> dict[tuple[str, str], int] | None:
        """The watermarks of the group's sources as this gateway last committed them, if it
        remembers every one (else None: they are read, and locked, first)."""
        known: dict[tuple[str, str], int] = {}
        for entry in group:
            for batch in entry.batches:
                if not len(batch):
                    continue
                key = (entry.scope.member_id, batch.source)
                mark = self.marks.get(key)
                if mark is None:
                    return None
                known[key] = mark
        return known

    async def _write(
        self,
        conn: Any,
        group: list[Entry],
        fresh: dict[SeriesKey, int],
        known: dict[tuple[str, str], int] | None,
        begin: _Begin,
    ) -> tuple[list[Appended], dict[tuple[str, str], int], bytes | None]:
        """The group's statements but the last; returns each batch's outcome, its sources'
        watermarks and its rollups' deltas (a binary COPY payload; None: no points).
        With ``known`` (remembered) watermarks the group is cut at them with no statement first,
        and the finish raises each only where it still holds that value: fewer raised than
        asked (another gateway stored a batch of the source meanwhile) raises ``_Moved``."""
        sources = sorted(
            {(e.scope.member_id, b.source, b.kind) for e in group for b in e.batches if len(b)}
        )
        marks: dict[tuple[str, str], int] = {}
        if known is not None:
            marks = dict(known)
        elif sources:
            await begin.first()
            columns = [list(c) for c in zip(*sources, strict=True)]
            rows = await conn.fetch(LOCK_MARKS, *columns[:2])
            if len(rows) < len(sources):  # a source's first batch: make its row (and lock all)
                rows = await conn.fetch(WATERMARKS, *columns)
            marks = {(r["member_id"], r["source"]): r["watermark"] for r in rows}
        before = dict(marks)
        raised: dict[tuple[str, str], int] = {}
        kept: list[tuple[MemberScope, str, Points]] = []
        results: list[Appended] = []
        for entry in group:  # in arrival order: a resend is cut by what came before it
            accepted = duplicates = 0
            for batch in entry.batches:
                points = cast(Points, batch.points)
                if not len(points):
                    continue
                key = (entry.scope.member_id, batch.source)
                cut = int(np.searchsorted(points.offset, marks[key], side="right"))
                duplicates += cut
                if cut < len(points):
                    kept.append((entry.scope, batch.source, points.take(slice(cut, None))))
                    marks[key] = raised[key] = int(points.offset[-1])
                    accepted += len(points) - cut
            results.append(Appended(accepted, duplicates))
        latest: list[list[Any]] = [[] for _ in range(6)]
        deltas = None
        if kept:
            latest, deltas = await self._points(conn, kept, fresh, begin)
        ordered = [(key, mark, before[key]) for key, mark in sorted(raised.items())]
        params = finish_params(latest, group[-1].now, ordered, _counters(group, results))
        await begin.first()
        if await conn.fetchval(FINISH, *params) != len(ordered):
            raise _Moved
        return results, marks, deltas

    async def _points(
        self,
        conn: Any,
        kept: list[tuple[MemberScope, str, Points]],
        fresh: dict[SeriesKey, int],
        begin: _Begin,
    ) -> tuple[list[list[Any]], bytes]:
        """COPY the points; returns the series' latest values and the rollups' deltas of the
        finest stored tier (a binary COPY payload, sent as the transaction ends)."""
        ids = await self._series_ids(conn, kept, fresh, begin)
        # a batch may name tags none of its points has (a collector's spool rows keep their
        # parse's names; a batch cut at the watermark keeps all): those have no series, and
        # -1 is never indexed
        series = [
            np.array([ids.get((scope.member_id, source, t), -1) for t in p.tags], np.int64)[p.tag]
            for scope, source, p in kept
        ]
        rows = Rows.of(
            np.concatenate(series),
            np.concatenate([p.step for _, _, p in kept]),
            np.concatenate([p.wall for _, _, p in kept]),
            np.concatenate([p.value for _, _, p in kept]),
            np.concatenate([p.offset for _, _, p in kept]),
        )
        # asyncpg sends the statement, the payload and its end at once (a buffer, not bytes:
        # asyncpg would take bytes for a file's path)
        await conn._copy_in(begin.prefix() + COPY_BLOCKS, memoryview(rows.copy_payload()), None)
        # folded into every tier later (metric_rollups.py)
        return rows.latest(), rows.rollup_payload(STORED_TIERS[:1])

    async def _series_ids(
        self,
        conn: Any,
        kept: list[tuple[MemberScope, str, Points]],
        fresh: dict[SeriesKey, int],
        begin: _Begin,
    ) -> dict[SeriesKey, int]:
        """Ids of the points' series, made where missing; ``fresh`` gets the ones looked up in
        this transaction (cached once it committed)."""
        scopes: dict[SeriesKey, MemberScope] = {}
        for scope, source, p in kept:
            for i in np.flatnonzero(np.bincount(p.tag, minlength=len(p.tags))).tolist():
                scopes[(scope.member_id, source, p.tags[i])] = scope
        missing = sorted(k for k in scopes if k not in self.series)
        if missing:
            await begin.first()
            await conn.execute(
                NEW_SERIES,
                [scopes[k].job_id for k in missing],
                [scopes[k].attempt_id for k in missing],
                [k[0] for k in missing],
                [k[1] for k in missing],
                [k[2] for k in missing],
                _NO_STEP,
            )
            found = await conn.fetch(
                SERIES_IDS, [k[0] for k in missing], [k[1] for k in missing],
                [k[2] for k in missing],
            )  # fmt: skip
            for row in found:
                fresh[(row["member_id"], row["source"], row["tag"])] = row["id"]
        return {k: self.series.get(k) or fresh[k] for k in scopes}


def _counters(group: list[Entry], results: list[Appended]) -> list[list[Any]]:
    """The members' counters of a group: members, points, duplicates, corrupt, dropped x2, at."""
    per: dict[str, list[Any]] = {}
    for entry, result in zip(group, results, strict=True):
        c = entry.counters
        now: list[Any] = [result.accepted, result.duplicates, c.corrupt_records]
        now += [c.dropped_records, c.dropped_bytes, entry.now]
        old = per.get(entry.scope.member_id)
        if old is not None:  # sums, then the cumulative counters' and the clock's highest
            highest = [max(a, b) for a, b in zip(old[2:], now[2:], strict=True)]
            now = [old[0] + now[0], old[1] + now[1], *highest]
        per[entry.scope.member_id] = now
    members = sorted(per)
    return [members, *([per[m][i] for m in members] for i in range(6))]


@dataclass
class _Begin:
    """Whether a group's transaction has begun. Its ``BEGIN`` goes in the message of the first
    statement that can carry it: the points' COPY (one simple query of two statements, asyncpg
    reads past the first's completion to the COPY's start) when nothing precedes it, as on
    the remembered watermarks' path; else it is sent alone first."""

    conn: Any
    done: bool = False

    def prefix(self) -> str:
        if self.done:
            return ""
        self.done = True
        return "BEGIN; "

    async def first(self) -> None:
        if not self.done:
            await self.conn.execute("BEGIN")
            self.done = True


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class Coalesced(Generic[K, V]):
    """Lookups by key asked for while one is under way, answered by the next one for them all
    (``fetch`` gets the keys, at most ``MAX_GROUP`` times 4, and returns what it found)."""

    fetch: Callable[[list[K]], Awaitable[dict[K, V]]]
    waiting: dict[K, list[asyncio.Future[V | None]]] = field(default_factory=dict)
    reading: bool = False

    async def read(self, key: K) -> V | None:
        done: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(key, []).append(done)
        if not self.reading:
            self.reading = True
            asyncio.get_running_loop().create_task(self._read())
        return await asyncio.shield(done)

    async def _read(self) -> None:
        try:
            while self.waiting:
                keys = list(self.waiting)[: MAX_GROUP * 4]
                futures = [self.waiting.pop(k) for k in keys]
                try:
                    found = await self.fetch(keys)
                except BaseException as exc:
                    for waiters in futures:
                        for f in waiters:
                            _settle(f, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for key, waiters in zip(keys, futures, strict=True):
                    for f in waiters:
                        _settle(f, found.get(key))
        finally:
            self.reading = False


def _settle(done: asyncio.Future[Any], outcome: object) -> None:
    if done.done():  # its caller was cancelled
        return
    if isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)
