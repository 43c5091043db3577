"""The collector's durable spool: SQLite in WAL mode on host-local storage.

What is parsed from a source and how far the source was read are written in one transaction,
so a collector killed at any point reads again exactly what it had not spooled. A record leaves
the spool only when the gateway acknowledged the batch that carried it (``ack``); until then
every ``batch`` returns it again, in order. ``synchronous=FULL``: a commit is on disk before
the collector goes on, so a power loss loses nothing the files would not also lose.

Capacity and the full-spool policy: the spool holds at most ``max_bytes`` of records. When
full, the collector stops reading (``full``): the files themselves are the buffer, nothing is
dropped and the training job never waits on telemetry. Bytes lost that way are counted exactly,
in ``dropped_bytes``, only when a file is truncated or replaced before it was read to its end.
``dropped_records`` counts records parsed but not kept (none under this policy; the counter
exists so that a future policy stays honest). ``corrupt_records``: failed a CRC or did not
parse. The counters are cumulative per member and travel with every batch.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from adapters.telemetry.localfs import check_local
from domain.telemetry import Record, SourceBatch, SourceKind

SPOOL_FILE = "spool.sqlite"
DEFAULT_MAX_BYTES = 1024 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sources (
    member TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL, generation INTEGER NOT NULL,
    device INTEGER NOT NULL, inode INTEGER NOT NULL, position INTEGER NOT NULL,
    size_seen INTEGER NOT NULL, PRIMARY KEY (member, path));
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, member TEXT NOT NULL, source TEXT NOT NULL,
    kind TEXT NOT NULL, offset INTEGER NOT NULL, points INTEGER NOT NULL, payload BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS records_member ON records (member, id);
CREATE TABLE IF NOT EXISTS counters (
    member TEXT PRIMARY KEY, corrupt_records INTEGER NOT NULL DEFAULT 0,
    dropped_records INTEGER NOT NULL DEFAULT 0, dropped_bytes INTEGER NOT NULL DEFAULT 0);
"""

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[tuple[str, int, float, float]]).decode


@dataclass(slots=True)
class SourceState:
    """How far one file of a member was read, and which file (inode) that was."""

    path: str  # relative to the member's metrics directory
    kind: SourceKind
    generation: int
    device: int
    inode: int
    position: int
    size_seen: int

    @property
    def name(self) -> str:
        return f"{self.path}#{self.generation}"


@dataclass(slots=True)
class Counters:
    corrupt_records: int = 0
    dropped_records: int = 0
    dropped_bytes: int = 0


@dataclass(slots=True)
class SpoolBatch:
    up_to: int  # the last record id in it: ``ack(member, up_to)`` removes them all
    sources: list[SourceBatch] = field(default_factory=list)
    points: int = 0


class Spool:
    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        check_local(directory)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = directory / SPOOL_FILE
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self.bytes = int(
            self._db.execute("SELECT coalesce(sum(length(payload)), 0) FROM records").fetchone()[0]
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @property
    def full(self) -> bool:
        return self.bytes >= self.max_bytes

    # -- sources ------------------------------------------------------------------------------

    def sources(self, member: str) -> dict[str, SourceState]:
        with self._lock:
            rows = self._db.execute(
                "SELECT path, kind, generation, device, inode, position, size_seen FROM sources"
                " WHERE member = ?",
                (member,),
            ).fetchall()
        return {r[0]: SourceState(*r) for r in rows}

    def put_source(self, member: str, state: SourceState) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (member, state.path, state.kind, state.generation, state.device, state.inode,
                 state.position, state.size_seen),
            )  # fmt: skip

    def append(
        self, member: str, state: SourceState, records: Sequence[Record], corrupt: int
    ) -> None:
        """Spool ``records`` of ``state``'s source and record its new position, atomically."""
        rows = []
        added = 0
        for r in records:
            if not r.scalars:
                continue
            payload = _encode([(s.tag, s.step, s.wall_time, s.value) for s in r.scalars])
            added += len(payload)
            rows.append((member, state.name, state.kind, r.offset, len(r.scalars), payload))
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT INTO records (member, source, kind, offset, points, payload)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
                db.execute(
                    "INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (member, state.path, state.kind, state.generation, state.device,
                     state.inode, state.position, state.size_seen),
                )  # fmt: skip
                if corrupt:
                    self._count(member, "corrupt_records", corrupt)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self.bytes += added

    def count(self, member: str, counter: str, n: int) -> None:
        if n:
            with self._lock:
                self._count(member, counter, n)

    def _count(self, member: str, counter: str, n: int) -> None:
        assert counter in ("corrupt_records", "dropped_records", "dropped_bytes")
        self._db.execute("INSERT OR IGNORE INTO counters (member) VALUES (?)", (member,))
        self._db.execute(
            f"UPDATE counters SET {counter} = {counter} + ? WHERE member = ?", (n, member)
        )

    def counters(self, member: str) -> Counters:
        with self._lock:
            row = self._db.execute(
                "SELECT corrupt_records, dropped_records, dropped_bytes FROM counters"
                " WHERE member = ?",
                (member,),
            ).fetchone()
        return Counters(*row) if row else Counters()

    # -- shipping -----------------------------------------------------------------------------

    def batch(self, member: str, max_points: int) -> SpoolBatch | None:
        """The member's oldest records, at least one, up to ``max_points`` points; per source
        in record order. None when the member has nothing spooled."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, source, kind, offset, points, payload FROM records"
                " WHERE member = ? ORDER BY id LIMIT ?",
                (member, max(1, max_points)),
            ).fetchall()
        if not rows:
            return None
        out = SpoolBatch(up_to=rows[0][0])
        by_source: dict[str, SourceBatch] = {}
        for rid, source, kind, offset, points, payload in rows:
            if out.points and out.points + points > max_points:
                break
            b = by_source.get(source)
            if b is None:
                b = by_source[source] = SourceBatch(source, kind, [])
            for tag, step, wall, value in _decode(payload):
                b.tags.append(tag)
                b.offsets.append(offset)
                b.steps.append(step)
                b.walls.append(wall)
                b.values.append(value)
            out.points += points
            out.up_to = rid
        out.sources = list(by_source.values())
        return out

    def ack(self, member: str, up_to: int) -> None:
        with self._lock:
            freed = self._db.execute(
                "SELECT coalesce(sum(length(payload)), 0) FROM records"
                " WHERE member = ? AND id <= ?",
                (member, up_to),
            ).fetchone()[0]
            self._db.execute("DELETE FROM records WHERE member = ? AND id <= ?", (member, up_to))
            self.bytes -= int(freed)

    def pending(self, member: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT count(*) FROM records WHERE member = ?", (member,)
            ).fetchone()
        return int(row[0])

    def forget(self, member: str) -> None:
        """A member collected to its end: drop its sources (its counters were shipped)."""
        with self._lock:
            self._db.execute("DELETE FROM sources WHERE member = ?", (member,))
            self._db.execute("DELETE FROM counters WHERE member = ?", (member,))
