"""The collector's durable spool: SQLite in WAL mode on host-local storage (docs/telemetry.md).

Tables: ``members`` (id, counters), ``sources`` (one row per file and generation: device, inode,
read position, size last seen, ``current`` while its path still names it), ``chunks`` (the
scalars of up to ``ROW_POINTS`` points of consecutive records of one source, as packed columns:
``columns.Points``; a record is never split between rows).

Atomicity: a chunk's rows and its source's new read position are written in one transaction,
so a collector killed anywhere reads again exactly what it had not spooled. A row leaves only
through ``ack``, after the gateway acknowledged it; until then ``batch`` returns it again.

Durability: ``synchronous=FULL``: every commit is fsynced before the collector goes on, so not
even a power loss loses what was spooled. (``NORMAL`` could roll back the last commits on a power
loss, records and position together, losing only data whose file was gone after the reboot.)
FULL was measured at about 0.3 ms more per transaction, one transaction per chunk of up to 1 MiB.

Capacity and the full-spool policy: at most ``max_bytes`` of rows (packed size plus
``ROW_OVERHEAD`` a row; the file keeps its high-water size, free pages are reused). When full,
the tailer stops reading (``full``): the metric files are the buffer, nothing is dropped, and the
training job never waits. Counters per member, cumulative, shipped with every batch:
``corrupt_records`` (failed a CRC, did not parse, or lost a scalar the gateway would refuse),
``dropped_bytes`` (never read: the file was truncated, rewritten, replaced or deleted first;
exact as far as the size was seen), ``dropped_records`` (parsed but not spooled: none under this
policy, which pauses instead).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from adapters.telemetry.columns import Points
from adapters.telemetry.localfs import check_local
from application import instruments as i
from application.instruments import NO_INSTRUMENTS, Instruments
from domain.errors import InvalidInput
from domain.telemetry import Record, Scalar, SourceKind

SPOOL_FILE = "spool.sqlite"
LOCK_FILE = "spool.lock"
DEFAULT_MAX_BYTES = 2 * 1024**3
ROW_OVERHEAD = 48  # bytes a row costs besides its payload (ids, offsets, counts, b-tree cell)
ROW_POINTS = 4096  # points a row holds at most (more only for one record that has more)
Counter = Literal["corrupt_records", "dropped_records", "dropped_bytes"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS members (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
    corrupt_records INTEGER NOT NULL DEFAULT 0, dropped_records INTEGER NOT NULL DEFAULT 0,
    dropped_bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY, member INTEGER NOT NULL, path TEXT NOT NULL,
    generation INTEGER NOT NULL, kind TEXT NOT NULL, device INTEGER NOT NULL,
    inode INTEGER NOT NULL, position INTEGER NOT NULL, size_seen INTEGER NOT NULL,
    mark BLOB NOT NULL, current INTEGER NOT NULL, UNIQUE (member, path, generation));
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, member INTEGER NOT NULL, source INTEGER NOT NULL,
    records INTEGER NOT NULL, points INTEGER NOT NULL, payload BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_member ON chunks (member, id);
"""
_COLUMNS = "id, path, generation, kind, device, inode, position, size_seen, mark"

_decode_v1 = msgspec.msgpack.Decoder(list[tuple[str, int, float, float]]).decode


@dataclass(slots=True)
class SourceState:
    """One generation of one file of a member: which file (device, inode) and how far it was
    parsed (``position``); ``size_seen``: its size when last looked at; ``mark``: the bytes just
    before ``position``, to notice a file rewritten in place."""

    id: int
    path: str  # relative to the member's metrics directory
    generation: int
    kind: SourceKind
    device: int
    inode: int
    position: int = 0
    size_seen: int = 0
    mark: bytes = b""

    @property
    def name(self) -> str:
        return f"{self.path}#{self.generation}"


@dataclass(slots=True)
class Counters:
    corrupt_records: int = 0
    dropped_records: int = 0
    dropped_bytes: int = 0


@dataclass(slots=True)
class SpooledSource:
    name: str  # the source's name: path + "#" + generation
    kind: SourceKind
    points: Points


@dataclass(slots=True)
class SpoolBatch:
    up_to: int  # the last row id in it: ``ack(member, up_to)`` removes it and all before
    sources: list[SpooledSource] = field(default_factory=list)
    points: int = 0
    records: int = 0


class Spool:
    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        row_points: int = ROW_POINTS,
        instruments: Instruments = NO_INSTRUMENTS,
    ) -> None:
        check_local(directory)
        self.instruments = instruments
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = directory / SPOOL_FILE
        self.max_bytes = max_bytes
        self.row_points = row_points
        self._lock_fd = _exclusive(directory / LOCK_FILE)
        try:
            _not_emptied(self.path)
        except InvalidInput:
            os.close(self._lock_fd)
            raise
        self._lock = threading.Lock()
        self._members: dict[str, int] = {}
        self._names: dict[int, tuple[str, SourceKind]] = {}
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA journal_size_limit=67108864")
            self._db.executescript(_SCHEMA)
            self._upgrade()
            self.bytes = self._used("1")[0]
        except sqlite3.DatabaseError as exc:
            self._db.close()
            os.close(self._lock_fd)
            raise InvalidInput(
                f"the spool {self.path} cannot be opened: {exc}",
                fix="move the spool directory aside (its unshipped metrics are lost) and start "
                "the collector again",
                field="spool",
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()
            os.close(self._lock_fd)

    @property
    def full(self) -> bool:
        return self.bytes >= self.max_bytes

    # -- sources (written by the member's tailer only) ----------------------------------------

    def sources(self, member: str) -> dict[str, SourceState]:
        """The member's current sources by path."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM sources WHERE member = ? AND current",
                (self._member(member),),
            ).fetchall()
        return {r[1]: SourceState(*r) for r in rows}

    def new_source(
        self, member: str, path: str, kind: SourceKind, device: int, inode: int, size: int
    ) -> SourceState:
        """The next generation of ``path`` (0 for a path never seen), read from offset 0."""
        with self._lock, self._transaction():
            m = self._member(member)
            top = self._db.execute(
                "SELECT max(generation) FROM sources WHERE member = ? AND path = ?", (m, path)
            ).fetchone()[0]
            state = SourceState(0, path, 0 if top is None else top + 1, kind, device, inode)
            state.size_seen = size
            cur = self._db.execute(
                "INSERT INTO sources (member, path, generation, kind, device, inode, position,"
                " size_seen, mark, current) VALUES (?, ?, ?, ?, ?, ?, 0, ?, x'', 1)",
                (m, path, state.generation, kind, device, inode, size),
            )
            state.id = int(cur.lastrowid or 0)
        return state

    def retire(self, member: str, state: SourceState, dropped_bytes: int = 0) -> None:
        """``state``'s path no longer names its file; ``dropped_bytes`` of it will never be read
        (they are counted)."""
        with self._lock, self._transaction():
            self._save(state, current=False)
            self._count(member, "dropped_bytes", dropped_bytes)

    def settle_retired(self, member: str) -> int:
        """Retired sources left unfinished by an earlier run (no descriptor reaches them now):
        count their unread bytes as dropped. Returns the bytes counted."""
        with self._lock, self._transaction():
            m = self._member(member)
            lost = self._db.execute(
                "SELECT coalesce(sum(size_seen - position), 0) FROM sources"
                " WHERE member = ? AND NOT current AND size_seen > position",
                (m,),
            ).fetchone()[0]
            self._db.execute(
                "UPDATE sources SET size_seen = position"
                " WHERE member = ? AND NOT current AND size_seen > position",
                (m,),
            )
            self._count(member, "dropped_bytes", int(lost))
        return int(lost)

    def save(self, member: str, state: SourceState) -> None:
        """Record what changed about ``state`` with no record to spool (size seen, position)."""
        with self._lock, self._transaction():
            self._save(state)

    def append(self, member: str, state: SourceState, points: Points, corrupt: int = 0) -> None:
        """Spool the ``points`` of ``state``'s source and its new position, atomically (records
        without a scalar leave nothing but the position)."""
        m = self._member_locked(member)
        rows = [
            (m, state.id, piece.record_count(), len(piece), piece.pack())
            for piece in points.split(self.row_points)
        ]
        added = sum(len(r[4]) + ROW_OVERHEAD for r in rows)
        with self._lock, self._transaction():
            self._db.executemany(
                "INSERT INTO chunks (member, source, records, points, payload)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            self._save(state)
            self._count(member, "corrupt_records", corrupt)
        self.bytes += added

    # -- counters -----------------------------------------------------------------------------

    def count(self, member: str, counter: Counter, n: int) -> None:
        if n:
            with self._lock, self._transaction():
                self._count(member, counter, n)

    def counters(self, member: str) -> Counters:
        with self._lock:
            row = self._db.execute(
                "SELECT corrupt_records, dropped_records, dropped_bytes FROM members"
                " WHERE name = ?",
                (member,),
            ).fetchone()
        return Counters(*row) if row else Counters()

    # -- shipping -----------------------------------------------------------------------------

    def batch(self, member: str, max_points: int, after: int = 0) -> SpoolBatch | None:
        """The member's oldest rows after row id ``after``: at least one, and more while the
        points stay within ``max_points``; per source, in record order. None when there is
        nothing after ``after``."""
        out = SpoolBatch(up_to=0)
        parts: dict[int, list[Points]] = {}
        with self._lock:
            cursor = self._db.execute(
                "SELECT id, source, records, points, payload FROM chunks"
                " WHERE member = ? AND id > ? ORDER BY id",
                (self._member(member), after),
            )
            for rid, source, records, points, payload in cursor:  # read lazily: stops early
                if out.points and out.points + points > max_points:
                    break
                parts.setdefault(source, []).append(Points.unpack(payload))
                out.points += points
                out.records += records
                out.up_to = rid
            cursor.close()
            names = {source: self._source_name(source) for source in parts}
        if not out.up_to:
            return None
        out.sources = [SpooledSource(*names[s], Points.concat(p)) for s, p in parts.items()]
        return out

    def ack(self, member: str, up_to: int) -> None:
        """The gateway committed the member's rows up to id ``up_to``: remove them."""
        with self._lock, self._transaction():
            m = self._member(member)
            freed = self._used("member = ? AND id <= ?", (m, up_to))[0]
            self._db.execute("DELETE FROM chunks WHERE member = ? AND id <= ?", (m, up_to))
        self.bytes -= freed

    def depth(self) -> int:
        """Records of every member not acknowledged yet (reads the whole table: a gauge's
        reading, taken seldom)."""
        with self._lock:
            return int(
                self._db.execute("SELECT coalesce(sum(records), 0) FROM chunks").fetchone()[0]
            )

    def pending(self, member: str) -> int:
        """Records of the member not acknowledged yet."""
        with self._lock:
            return self._used("member = ?", (self._member(member),))[1]

    def forget(self, member: str) -> int:
        """Remove everything of a member (collected to its end, or given up): its sources,
        counters and any record still spooled. Returns the records removed."""
        with self._lock, self._transaction():
            m = self._member(member)
            freed, n = self._used("member = ?", (m,))
            for table, column in (("chunks", "member"), ("sources", "member"), ("members", "id")):
                self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (m,))
            self._members.pop(member, None)
            self._names.clear()  # source ids may be used again
        self.bytes -= freed
        return n

    # -- internals (called with the lock held) ------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _used(self, where: str, args: tuple[object, ...] = ()) -> tuple[int, int]:
        """(bytes counted against the capacity, records) of the rows ``where`` selects."""
        used, records = self._db.execute(
            f"SELECT coalesce(sum(length(payload)), 0) + {ROW_OVERHEAD} * count(*),"
            f" coalesce(sum(records), 0) FROM chunks WHERE {where}",
            args,
        ).fetchone()
        return int(used), int(records)

    def _upgrade(self) -> None:
        """A spool of an earlier collector (one row per record in ``records``): move its rows
        into ``chunks``, in order, so nothing spooled is lost."""
        old = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'"
        ).fetchone()
        if old is None:
            return
        with self._transaction():
            rows = self._db.execute(
                "SELECT member, source, offset, payload FROM records ORDER BY id"
            ).fetchall()
            for member, source, offset, payload in rows:
                record = Record(offset, tuple(Scalar(*s) for s in _decode_v1(payload)))
                points = Points.from_records([record])
                self._db.execute(
                    "INSERT INTO chunks (member, source, records, points, payload)"
                    " VALUES (?, ?, 1, ?, ?)",
                    (member, source, len(points), points.pack()),
                )
            self._db.execute("DROP TABLE records")

    def _member_locked(self, member: str) -> int:
        m = self._members.get(member)
        if m is None:
            with self._lock:
                m = self._member(member)
        return m

    def _member(self, member: str) -> int:
        m = self._members.get(member)
        if m is None:
            self._db.execute("INSERT OR IGNORE INTO members (name) VALUES (?)", (member,))
            row = self._db.execute("SELECT id FROM members WHERE name = ?", (member,)).fetchone()
            m = self._members[member] = int(row[0])
        return m

    def _source_name(self, source: int) -> tuple[str, SourceKind]:
        got = self._names.get(source)
        if got is None:
            path, generation, kind = self._db.execute(
                "SELECT path, generation, kind FROM sources WHERE id = ?", (source,)
            ).fetchone()
            got = self._names[source] = (f"{path}#{generation}", kind)
        return got

    def _save(self, state: SourceState, *, current: bool = True) -> None:
        self._db.execute(
            "UPDATE sources SET device = ?, inode = ?, position = ?, size_seen = ?, mark = ?,"
            " current = ? WHERE id = ?",
            (state.device, state.inode, state.position, state.size_seen, state.mark,
             int(current), state.id),
        )  # fmt: skip

    def _count(self, member: str, counter: Counter, n: int) -> None:
        if n and counter != "dropped_bytes":
            reason = "corrupt" if counter == "corrupt_records" else "dropped"
            self.instruments.inc(i.COLLECTOR_DROPS, n, reason=reason)
        if n:
            self._db.execute(
                f"UPDATE members SET {counter} = {counter} + ? WHERE id = ?",
                (n, self._member(member)),
            )


def _not_emptied(path: Path) -> None:
    """Refuse a spool file of zero bytes. SQLite would take it for a new database, so every
    unshipped record would be lost without a word and every source start again at generation
    #0, whose records the gateway then takes for ones it already stored. A spool the collector
    made is never empty: its first statement (WAL mode) writes the file's first page."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size == 0:
            raise InvalidInput(
                f"the spool file {path} is empty (zero bytes): it was truncated or replaced, "
                "and its unshipped metrics are gone",
                fix=f"restore {path} (with its -wal file) if you have a copy; otherwise move "
                "the spool directory aside and start the collector again: the member files' "
                "sources then start at generation #0, and records the gateway stored before "
                "under those names are not stored again",
                field="spool",
            )


def _exclusive(path: Path) -> int:
    """A lock held while the spool is open: two collectors on one spool would ship twice."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InvalidInput(
            f"another collector uses the spool {path.parent}",
            fix="run one collector per spool directory (stop the other one, or pass another "
            "--spool)",
            field="spool",
        ) from None
    return fd
